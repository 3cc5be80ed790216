"""Thin shells the trainer hands to Ray: the driver imports this module, never torch.

Ray pickles a class by reference, so the driver only needs the shell; the heavy role
(torch, gymnasium, the algorithm) is imported inside the role's own process, in
parallel with every other role's start (docs/architecture.md, "Distributed engine").
"""

from __future__ import annotations

from typing import Any

from kilorl.core import Actor, Learner, Rollout, RolloutInfo


class ActorProcess(Actor):
    """A ``RolloutWorker`` built in the Ray actor's process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from kilorl.roles.actor import RolloutWorker

        self._role = RolloutWorker(*args, **kwargs)

    def ready(self) -> int:
        return self._role.ready()

    def collect(self, min_version: int) -> tuple[Rollout, RolloutInfo]:
        return self._role.collect(min_version)


class LearnerProcess(Learner):
    """A ``LearnerRole`` built in the Ray actor's process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from kilorl.roles.learner import LearnerRole

        self._role = LearnerRole(*args, **kwargs)

    def publish(self, version: int) -> None:
        self._role.publish(version)

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        return self._role.update(version, env_steps_total, *rollouts)

    def state(self) -> dict[str, Any]:
        return self._role.state()

    def weights_digest(self) -> float:
        return self._role.weights_digest()
