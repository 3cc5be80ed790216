"""Thin shells the trainer hands to Ray: the driver imports this module, never torch.

Ray pickles a class by reference, so the driver only needs the shell; the heavy role
(torch, gymnasium, the algorithm) is imported inside the role's own process, in
parallel with every other role's start (docs/architecture.md, "Distributed engine").

With ``monitor=MonitorSpec(...)`` a shell also reports the role's metrics
(:mod:`kilorl.roles.monitoring`), by composition: the role gets a measuring wrapper
around its parameter store, the shell reports what the role returns.
"""

from __future__ import annotations

from typing import Any

from kilorl.core import Actor, Learner, Rollout, RolloutInfo


class ActorProcess(Actor):
    """A ``RolloutWorker`` built in the Ray actor's process."""

    def __init__(self, cfg: Any, store: Any, index: int, *args: Any, monitor: Any = None, **kwargs: Any) -> None:
        from kilorl.roles.actor import RolloutWorker

        self._report = None
        if monitor is not None:
            from kilorl.roles.monitoring import ActorReporting

            self._report = ActorReporting(monitor, index, store)
            store = self._report.store
        self._role = RolloutWorker(cfg, store, index, *args, **kwargs)

    def ready(self) -> int:
        return self._role.ready()

    def collect(self, min_version: int) -> tuple[Rollout, RolloutInfo]:
        rollout, info = self._role.collect(min_version)
        if self._report is not None:
            self._report.rollout(info)
        return rollout, info


class LearnerProcess(Learner):
    """A ``LearnerRole`` built in the Ray actor's process."""

    def __init__(self, cfg: Any, store: Any, rank: int = 0, *args: Any, monitor: Any = None, **kwargs: Any) -> None:
        from kilorl.roles.learner import LearnerRole

        self._report = None
        if monitor is not None:
            from kilorl.roles.monitoring import LearnerReporting

            self._report = LearnerReporting(monitor, rank, store)
            store = self._report.store
        self._role = LearnerRole(cfg, store, rank, *args, **kwargs)

    def publish(self, version: int) -> None:
        self._role.publish(version)

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        stats = self._role.update(version, env_steps_total, *rollouts)
        if self._report is not None:
            self._report.update(stats)
        return stats

    def state(self) -> dict[str, Any]:
        return self._role.state()

    def weights_digest(self) -> float:
        return self._role.weights_digest()
