"""The on-policy data path: rollouts per version, pipelined ``pipeline_depth`` deep.

Iteration ``i`` trains on rollouts collected with parameters at least version
``i - pipeline_depth`` and publishes version ``i + 1``; with depth 0 actors and learners
alternate, with depth >= 1 actors collect the next rollout while the learners train.
Nothing here knows which algorithm runs: it moves ``Rollout`` refs and statistics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kilorl.config import Config
from kilorl.core import RolloutInfo
from kilorl.trainer.session import RoleSession


@dataclass
class IterationResult:
    """What one learner update produced, as the driver sees it."""

    iteration: int
    """Version published by this update."""
    env_steps: int
    """Environment steps consumed so far (all actors)."""
    infos: list[RolloutInfo]
    stats: dict[str, float]
    """Rank 0's update statistics."""
    last: bool
    """No further rollout is in flight (the run's env-step budget is used up)."""


class OnPolicyLoop:
    """Feeds whole rollouts to the learners; actor ``j`` goes to learner ``j % learners``."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        self.cfg, self.roles = cfg, roles
        self.iteration, self.env_steps = iteration, env_steps
        self.first_version = iteration
        self.next_collect = iteration
        self.pending: deque[tuple[list[Any], list[Any]]] = deque()

    def _submit(self) -> None:
        min_version = max(self.first_version, self.next_collect - self.cfg.train.pipeline_depth)
        refs = [a.collect.options(num_returns=2).remote(min_version) for a in self.roles.actors]
        self.pending.append(([r[0] for r in refs], [r[1] for r in refs]))
        self.next_collect += 1

    def _room(self) -> bool:
        """Another rollout still fits in the run's env-step budget."""
        in_flight = self.env_steps + len(self.pending) * self.cfg.batch_size
        return in_flight < self.cfg.train.total_env_steps

    def __iter__(self) -> Iterator[IterationResult]:
        import ray

        while len(self.pending) <= self.cfg.train.pipeline_depth and self._room():
            self._submit()
        learners, n = self.roles.learners, len(self.roles.learners)
        while self.pending:
            rollout_refs, info_refs = self.pending.popleft()
            steps_after = self.env_steps + self.cfg.batch_size
            updates = [learners[r].update.remote(self.iteration + 1, steps_after, *rollout_refs[r::n]) for r in range(n)]
            self.env_steps = steps_after  # counted before _room: the rollout is consumed
            if self._room():
                self._submit()
            infos = ray.get(info_refs)
            stats = ray.get(updates)[0]
            self.iteration += 1
            yield IterationResult(self.iteration, self.env_steps, infos, stats, last=not self.pending)
