"""The learner role of a run with several policies (``multi_agent.policies``).

One ``LearnerRole`` per policy, each built from the policy's view of the run
(``kilorl.config_policies``): its own algorithm, optimizer and gradient communication, and
its own published name (``policy/<name>``). An update hands each policy its own rollouts
(``kilorl.roles.policy_columns``: the env runner cuts one per policy); a policy outside
``multi_agent.policies_to_train`` is published unchanged and never stepped. Checkpoints keep
one part per policy (``policies/<name>/``, the single-policy files) so a policy's part can be
read, evaluated or resumed on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.core import CheckpointFiles, Learner, ParameterStore, Rollout
from kilorl.roles.checkpoint_format import POLICIES_DIR
from kilorl.roles.learner import LearnerRole

if TYPE_CHECKING:
    from kilorl.config import Config
    from kilorl.roles.agent_evaluation import AgentEpisodeRunner, AgentEpisodes


class PolicyLearners(Learner):
    """Some or all policies' learners in this process; with ``world`` ranks, one policy's rank ``rank``
    (its own process group: the trainer starts a group of processes per policy)."""

    def __init__(self, cfg: Config, store: ParameterStore, rank: int = 0, world: int = 1, backend: str = "gloo",
                 master: tuple[str, int] | None = None, state: dict[str, Any] | None = None,
                 weights_version: int | None = None, policies: list[str] | None = None) -> None:
        """``state``: a checkpoint's ``{"policies": {name: learner state}}`` (``load_checkpoint``).
        ``policies``: the ones this process trains (None: all); the trainer starts a process per
        policy, each placed on its policy's nodes (``resources.policies``)."""
        assert cfg.multi_agent is not None
        self.cfg = cfg
        self._episodes: AgentEpisodeRunner | None = None
        views = cfg.policy_configs()
        unknown = sorted(set(policies or []) - set(views))
        if unknown:
            raise ValueError(f"multi_agent.policies: no policy {unknown} (have {sorted(views)})")
        views = {n: v for n, v in views.items() if policies is None or n in policies}
        if world > 1 and len(views) > 1:
            raise ValueError(f"parallelism.learner={world}: ranks of one process group train one policy; this "
                             f"process was given {sorted(views)} (the trainer starts a group per policy)")
        saved = (state or {}).get(POLICIES_DIR, {})
        missing = [n for n in views if state is not None and n not in saved]
        if missing:
            raise ValueError(f"multi_agent.policies: the checkpoint has no part for {missing} "
                             f"(it has {sorted(saved)})")
        self.roles = {name: LearnerRole(view, store, rank, world, backend, master, state=saved.get(name),
                                        weights_version=weights_version, policy=name,
                                        trains=cfg.multi_agent.trains(name))
                      for name, view in views.items()}

    def publish(self, version: int) -> None:
        for role in self.roles.values():
            role.publish(version)

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:  # type: ignore[override]
        """Each policy trains on its own part of every rollout (``{policy: Rollout}``); rows get
        each policy's statistics as ``<stat>/<policy>``, and the learner's time summed."""
        out: dict[str, float] = {"learner_update_s": 0.0, "publish_s": 0.0}
        for name, role in self.roles.items():
            mine = [r[name] for r in rollouts]  # type: ignore[index]
            stats = role.update(version, env_steps_total, *mine)
            for key in ("learner_update_s", "publish_s"):
                out[key] += stats.pop(key, 0.0)
            out.update({f"{k}/{name}": v for k, v in stats.items()})
        return out

    def state(self) -> dict[str, Any]:
        return {POLICIES_DIR: {name: role.state() for name, role in self.roles.items()}}

    def checkpoint_files(self) -> CheckpointFiles:
        """One part per policy: ``policies/<name>/`` holds a single-policy learner's files."""
        files: dict[str, bytes] = {}
        meta: dict[str, Any] = {}
        for name, role in self.roles.items():
            part = role.checkpoint_files()
            files.update({f"{POLICIES_DIR}/{name}/{f}": data for f, data in part.files.items()})
            meta[name] = part.meta
        return CheckpointFiles(files, {POLICIES_DIR: meta})

    def evaluate(self, episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        """Episode returns (summed over agents) with this process's policies; every policy's
        must be here (else ``evaluate_policies`` with every group's ``policy_states``)."""
        return self.evaluate_policies(self.policy_states(), episodes, seed, deterministic).returns

    def policy_states(self) -> dict[str, dict[str, Any]]:
        """What playing each of this process's policies needs; an evaluation during training
        gathers every group's (each policy's learners are a process group of their own)."""
        return {name: role.algorithm.policy_state() for name, role in self.roles.items()}

    def evaluate_policies(self, states: dict[str, dict[str, Any]], episodes: int, seed: int,
                          deterministic: bool = True) -> AgentEpisodes:
        """Whole episodes with every policy's ``states[policy]`` on an environment of this
        process's own, built at the first call (as ``kilorl eval`` plays a checkpoint); the
        training state (weights, RNG) is left as it was."""
        from kilorl.roles.agent_evaluation import AgentEpisodeRunner

        if self._episodes is None:
            self._episodes = AgentEpisodeRunner(self.cfg)
        return self._episodes.play(states, episodes, seed, deterministic)

    def weights_digest(self) -> float:
        return sum(role.weights_digest() for role in self.roles.values())

    def weights_digests(self) -> dict[str, float]:
        """Each policy's fingerprint (tests check that a frozen policy's stays put)."""
        return {name: role.weights_digest() for name, role in self.roles.items()}
