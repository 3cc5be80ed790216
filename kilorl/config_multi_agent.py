"""The ``multi_agent`` section: which policy each agent of a PettingZoo environment acts with.

``policy_mapping`` maps agent-name patterns (``fnmatch``: ``agent_*``) to policies, the first
matching pattern wins, and every agent mapped to one policy shares its parameters. The
mapping is checked against the environment's agents when the env runners start
(``kilorl.envs.agent_mapping``): an agent no pattern maps, or agents of different spaces on
one policy, are errors naming them. Each policy may bring its own ``algo`` and ``model``
sections (absent: the run's); with several policies each is published under its own name
(``policy/<name>``), trained by its own learner group and checkpointed apart
(``kilorl.config_policies``, ``kilorl.roles.policy_learners``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kilorl.config_section import Section


class PolicySection(Section):
    """One policy that agents map to, with its own update and network where given."""

    algo: dict[str, Any] | None = None
    """This policy's algorithm section, written like the run's ``algo`` (``{name: ppo, lr: 3e-4}``);
    None: the run's ``algo``."""
    model: dict[str, Any] | None = None
    """This policy's network, written like the run's ``model``; None: the run's ``model``."""


class HierarchySection(Section):
    """Two policies of ``policies`` as the levels of one agent over option levels
    (``env.id: kilorl.envs.option_levels:option_levels``, whose ``env.kwargs.every_k`` sets how
    many moves an option lasts at most): the high level picks an option on each decision step
    and collects one row per option (``kilorl.roles.option_rollouts``); the low level moves,
    seeing the running option."""

    high: str
    """The policy that picks options (the ``high`` agent maps to it)."""
    low: str
    """The policy that moves, conditioned on the running option (the ``low`` agent maps to it)."""
    option_reward: Literal["sum", "discounted"] = "sum"
    """The high level's reward for one option: the plain ``sum`` of the env's rewards over the
    option's steps, or ``discounted`` by the low level's ``algo.gamma`` per step."""


class MultiAgentConfig(Section):
    """Agents of a PettingZoo environment mapped to policies."""

    policies: dict[str, PolicySection] = Field(min_length=1)
    """The policies by name (``{shared: {}}``)."""
    policy_mapping: dict[str, str] = Field(min_length=1)
    """Agent-name pattern -> policy, tried in order, the first match wins (``{"agent_*": shared}``)."""
    policies_to_train: list[str] | None = None
    """Policies whose parameters the learners update (None: all)."""
    centralized_critic: Literal["state"] | None = None
    """``state``: each agent column's observation is its own followed by the environment's
    global ``state()`` (MAPPO); the policy sees the first ``model.actor_inputs`` entries, the
    critic all. None: the critic sees what the policy sees (IPPO)."""
    hierarchy: HierarchySection | None = None
    """Two of the policies as the high and low level of one agent (None: agents only)."""

    @model_validator(mode="after")
    def _names_exist(self) -> MultiAgentConfig:
        for pattern, policy in self.policy_mapping.items():
            if policy not in self.policies:
                raise ValueError(f"policy_mapping: pattern {pattern!r} maps to {policy!r}, which is not in "
                                 f"multi_agent.policies ({', '.join(sorted(self.policies))})")
        unknown = sorted(set(self.policies_to_train or []) - set(self.policies))
        if unknown:
            raise ValueError(f"policies_to_train: {unknown} are not in multi_agent.policies "
                             f"({', '.join(sorted(self.policies))})")
        if self.policies_to_train is not None and not self.policies_to_train:
            raise ValueError("policies_to_train: empty, so nothing would train (list at least one of "
                             f"{', '.join(sorted(self.policies))}, or leave it out to train all)")
        if self.hierarchy is not None:
            levels = {"high": self.hierarchy.high, "low": self.hierarchy.low}
            for level, policy in levels.items():
                if policy not in self.policies:
                    raise ValueError(f"hierarchy.{level}: {policy!r} is not in multi_agent.policies "
                                     f"({', '.join(sorted(self.policies))})")
            if self.hierarchy.high == self.hierarchy.low:
                raise ValueError(f"hierarchy.low: {self.hierarchy.low!r} is also the high level; each level is a "
                                 "policy of its own")
        if len(self.policies) == 1 and self.policies_to_train is not None and not self.trains(next(iter(self.policies))):
            raise ValueError("policies_to_train: the run's only policy must train")
        return self

    @property
    def several(self) -> bool:
        """More than one policy: each is published, trained and checkpointed under its own name."""
        return len(self.policies) > 1

    def trains(self, policy: str) -> bool:
        """Whether the learners update ``policy`` (``policies_to_train``; the others stay as they are)."""
        return self.policies_to_train is None or policy in self.policies_to_train

    def check_several(self, data_path: str, normalize: list[str], transport: str,
                      recurrent: bool) -> None:
        """What several policies in one run need so far; a ValueError naming the field."""
        if not self.several:
            return
        names = ", ".join(sorted(self.policies))
        if data_path != "on_policy":
            raise ValueError(f"multi_agent.policies ({names}): several policies train on the on_policy data path "
                             f"only so far, the algorithm is on {data_path}")
        if normalize:
            raise ValueError(f"env.{normalize[0]}: not supported with several policies (multi_agent.policies: "
                             f"{names}): the normaliser statistics would have to be kept per policy")
        if transport != "ray":
            raise ValueError(f"store.transport={transport}: several policies (multi_agent.policies: {names}) hand "
                             "their rollouts over as Ray objects (transport: ray) so far")
        if recurrent:
            raise ValueError(f"model.recurrent: several policies (multi_agent.policies: {names}) are memoryless "
                             "so far")

    def check_run(self, algo_name: str, alive_mask: bool, actor_inputs: int | None,
                  eval_every_env_steps: int | None, eval_policy: str | None = None) -> None:
        """What the section needs of the algorithm (``alive_mask``: its losses leave dead agent
        columns out), the model and evaluation; errors name the field."""
        if self.centralized_critic == "state" and actor_inputs is None:
            raise ValueError("multi_agent.centralized_critic: state needs model.actor_inputs, the size of one agent's "
                             "own observation (the policy's input; the critic sees the global state after it)")
        if eval_every_env_steps is not None and not self.several:
            raise ValueError("evaluation.every_env_steps: evaluation episodes of a PettingZoo environment with one "
                             "policy are not supported yet (with several, multi_agent.policies, they are); training "
                             "rows carry each agent's returns")
        if eval_policy is not None and eval_policy not in self.policies:
            raise ValueError(f"evaluation.policy: {eval_policy!r} is not in multi_agent.policies "
                             f"({sorted(self.policies)})")
        if not alive_mask:
            raise ValueError(f"multi_agent: algo.name={algo_name} does not mask dead agent columns out of its "
                             "losses, so it cannot train on a PettingZoo environment")
