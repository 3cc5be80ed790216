"""The ``replay`` data path: env runners collect without waiting for the learner; every
rollout that completes goes to a learner, which adds it to its replay table and trains on
samples from it at the ratio the algorithm's config sets.

One iteration = the first ``parallelism.learner`` rollouts to complete, one per learner
(a learner handed none still trains, on its table). With ``train.pipeline_depth: 0`` an env
runner starts its next rollout only after the update that consumed its last one, so it acts
with exactly the newest version (runs repeat exactly, resumes included); with depth >= 1 it
starts at once, with whichever version is newest then (throughput). Nothing here knows the
algorithm: it moves ``Rollout`` refs and statistics.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from kilorl.config import Config
from kilorl.core import RolloutInfo
from kilorl.params.reconnect import ParametersLost
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.loop import RESTART_WAIT_S, learner_results
from kilorl.trainer.session import ACTOR_MAX_RESTARTS, RoleSession


class ReplayLoop:
    """Rollouts as they complete, to the learners' replay tables."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        self.cfg, self.roles = cfg, roles
        self.iteration, self.env_steps = iteration, env_steps
        self.first_version = iteration
        self.per_rollout = cfg.parallelism.envs_per_actor * cfg.algo.rollout_length
        self.pending: dict[Any, tuple[int, Any]] = {}
        """info ref -> (env runner, rollout ref) of the collections under way."""
        self.ready: deque[tuple[int, Any, RolloutInfo]] = deque()
        """Completed rollouts not yet handed to a learner."""
        self.lost_rollouts = 0
        self.max_lost = cfg.parallelism.actor * ACTOR_MAX_RESTARTS
        self.republished = 0
        self.eager = cfg.train.pipeline_depth > 0

    def in_flight(self, actor: int) -> list[Any]:
        return [info for info, (j, _) in self.pending.items() if j == actor]

    def _room(self) -> bool:
        """Another rollout still fits in the run's env-step budget."""
        taken = self.env_steps + (len(self.pending) + len(self.ready)) * self.per_rollout
        return taken < self.cfg.train.total_env_steps

    def _submit(self, j: int) -> None:
        if not self._room():
            return
        min_version = max(self.first_version, self.iteration - self.cfg.train.pipeline_depth)
        clock = self.env_steps + len(self.ready) * self.per_rollout
        rollout_ref, info_ref = self.roles.actors[j].collect.options(num_returns=2).remote(min_version, clock)
        self.pending[info_ref] = (j, rollout_ref)

    def _complete_one(self, deadline: float) -> None:
        """Wait for the next rollout to complete; a lost one is collected again."""
        import ray

        done, _ = ray.wait(list(self.pending), num_returns=1)
        j, rollout_ref = self.pending.pop(done[0])
        try:
            info = ray.get(done[0])
        except ParametersLost:  # the env runner's store worker restarted empty: republish, collect again
            if time.monotonic() > deadline:
                raise
            self.republished += 1
            ray.get(self.roles.learners[0].publish.remote(self.iteration))
            self._submit(j)
            return
        except ray.exceptions.RayActorError:  # died mid-rollout, or still restarting
            self.lost_rollouts += 1
            if self.lost_rollouts > self.max_lost or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            self._submit(j)
            return
        self.ready.append((j, rollout_ref, info))
        if self.eager:
            self._submit(j)

    def __iter__(self) -> Iterator[IterationResult]:
        n = len(self.roles.learners)
        for j in range(len(self.roles.actors)):
            self._submit(j)
        while self.pending or self.ready:
            deadline = time.monotonic() + RESTART_WAIT_S
            while len(self.ready) < n and self.pending:
                self._complete_one(deadline)
            batch = [self.ready.popleft() for _ in range(min(n, len(self.ready)))]
            infos = [info for _, _, info in batch]
            steps_after = self.env_steps + sum(info["env_steps"] for info in infos)
            learners = self.roles.learners
            updates = [learners[r].update.remote(self.iteration + 1, steps_after,
                                                 *([batch[r][1]] if r < len(batch) else []))
                       for r in range(n)]
            self.env_steps = steps_after
            stats = {**learner_results(updates)[0], "lost_rollouts": float(self.lost_rollouts),
                     "republished": float(self.republished)}
            self.iteration += 1
            if not self.eager:
                for j, _, _ in batch:
                    self._submit(j)
            yield IterationResult(self.iteration, self.env_steps, infos, stats,
                                  last=not self.pending and not self.ready)
