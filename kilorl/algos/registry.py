"""Algorithms registered by name: the only thing the trainer and the roles look up.

A spec names its parts by import path so that reading a config (``kilorl plan``, config
validation) never imports torch; the roles resolve the parts in their own processes.
Algorithms of other packages register through the entry-point group ``kilorl.algorithms``
(each entry names a module that calls ``register``), loaded when this module is first
imported: the ``algo`` section of ``kilorl.config`` is built from whatever is registered,
so adding an algorithm never means editing the trainer or the config module.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

DataPath = Literal["on_policy", "replay", "queue"]
"""How experience reaches the learner: whole rollouts per version (``on_policy``), a replay
table learners sample from (``replay``), or rollouts consumed as they complete (``queue``)."""


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm's parts (docs/architecture.md, "How an algorithm plugs in")."""

    name: str
    """The ``algo.name`` that selects it."""
    config: str
    """``module:Class`` of its pydantic config section (a subclass of ``AlgoConfig``)."""
    learner: str
    """``module:Class`` of its ``AlgorithmLearner``: ``Class(algo_cfg, LearnerContext)``."""
    policy: str
    """``module:Class`` of its ``BehaviourPolicy``: ``Class(algo_cfg, EnvRunnerContext)``, what
    picks the actions on an env runner and what it keeps per step."""
    model: str = "kilorl.models:build_actor_critic"
    """``module:function(obs_space, action_space, model_cfg)`` building the policy network
    (env runners, the learner's ``LearnerContext.build_model`` and ``kilorl eval`` use it)."""
    data_path: DataPath = "on_policy"
    """Which data path feeds its learner (``kilorl.trainer.data_paths``)."""
    alive_mask: bool = False
    """Its learner leaves dead agent columns (``steps["alive"]`` false) out of its losses, so it
    may train on PettingZoo environments (``kilorl.envs.agent_columns``)."""
    adder: str | None = None
    """``module:function(algo_cfg, rollout, stacked) -> rows``: the algorithm's adder (a rollout's
    replay rows), for a ``replay`` algorithm whose env runners insert into their own node's shard
    of a store table themselves (``kilorl.roles.store_replay``). None: the learner adds."""

    def load(self, part: Literal["config", "learner", "policy", "model", "adder"]) -> Any:
        path = getattr(self, part)
        if path is None:
            raise ValueError(f"algorithm {self.name!r} declares no {part}")
        module_name, _, attr = path.partition(":")
        return getattr(importlib.import_module(module_name), attr)


_REGISTRY: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Make ``spec`` available by name; a second spec under a taken name is an error."""
    old = _REGISTRY.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"algorithm {spec.name!r} is already registered ({old.learner})")
    _REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> AlgorithmSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown algorithm {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None


def names() -> list[str]:
    return sorted(_REGISTRY)


register(AlgorithmSpec(
    name="ppo", config="kilorl.algos.ppo.config:PPOConfig", learner="kilorl.algos.ppo.learner:PPOLearner",
    policy="kilorl.algos.ppo.policy:PPOPolicy", alive_mask=True,
))
register(AlgorithmSpec(
    name="a2c", config="kilorl.algos.a2c.config:A2CConfig", learner="kilorl.algos.a2c.learner:A2CLearner",
    policy="kilorl.algos.a2c.policy:A2CPolicy",
))
register(AlgorithmSpec(
    name="dqn", config="kilorl.algos.dqn.config:DQNConfig", learner="kilorl.algos.dqn.learner:DQNLearner",
    policy="kilorl.algos.dqn.policy:EpsilonGreedy", model="kilorl.algos.dqn.model:build_q_network",
    data_path="replay", adder="kilorl.algos.common.transitions:replay_rows",
))
register(AlgorithmSpec(
    name="sac", config="kilorl.algos.sac.config:SACConfig", learner="kilorl.algos.sac.learner:SACLearner",
    policy="kilorl.algos.sac.policy:SquashedGaussianPolicy", model="kilorl.algos.sac.model:build_sac_actor",
    data_path="replay", adder="kilorl.algos.common.transitions:replay_rows",
))
register(AlgorithmSpec(
    name="impala", config="kilorl.algos.impala.config:IMPALAConfig", learner="kilorl.algos.impala.learner:IMPALALearner",
    policy="kilorl.algos.impala.policy:BehaviourLogProb", data_path="queue",
))
register(AlgorithmSpec(
    name="appo", config="kilorl.algos.impala.config:APPOConfig", learner="kilorl.algos.impala.appo:APPOLearner",
    policy="kilorl.algos.impala.policy:BehaviourLogProb", data_path="queue",
))


ENTRY_POINT_GROUP = "kilorl.algorithms"
"""Entry-point group of out-of-tree algorithms: ``name = "package.module"`` (a module that registers)."""


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as err:  # noqa: BLE001 - re-raised naming the plugin
            raise ImportError(f"algorithm plugin {ep.name!r} ({ep.value}) failed to load: {err}") from err


_load_plugins()
