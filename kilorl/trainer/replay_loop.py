"""The ``replay`` data path: env runners collect without waiting for the learner; every
rollout that completes goes to a learner, which adds it to its replay table and trains on
samples from it at the ratio the algorithm's config sets.

One iteration = the first ``parallelism.learner`` rollouts to complete, one per learner
(a learner handed none still trains, on its table). With ``train.pipeline_depth: 0`` an env
runner starts its next rollout only after the update that consumed its last one, so it acts
with exactly the newest version (runs repeat exactly, resumes included); with depth >= 1 it
starts at once, with whichever version is newest then (throughput). Nothing here knows the
algorithm: it moves ``Rollout`` refs and statistics.

With ``parallelism.actor: 0`` no env is stepped: the learners train from
``replay_buffer.offline`` alone, and the step clock (``train.total_env_steps``, the metric
rows' ``env_steps``) advances by ``Config.rollout_steps`` per update, as if the rollouts had
been collected, so the gradient steps (``utd_ratio`` per step), ``learning_starts``, the
evaluations and checkpoints fall where an online run of that length has them.
"""

from __future__ import annotations

from collections.abc import Iterator

from kilorl.config import Config
from kilorl.trainer.as_completed import AsCompleted
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.loop import learner_results
from kilorl.trainer.session import RoleSession


class ReplayLoop(AsCompleted):
    """Rollouts as they complete, to the learners' replay tables."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        super().__init__(cfg, roles, iteration, env_steps)
        self.eager = cfg.train.pipeline_depth > 0

    def _submit(self, j: int) -> None:
        if self._room():
            self._collect(j, max(self.first_version, self.iteration - self.cfg.train.pipeline_depth))

    def _complete_one(self) -> None:
        done = self._next_completed()
        if done is None:
            return
        self.ready.append(done)
        if self.eager:
            self._submit(done[0])

    def __iter__(self) -> Iterator[IterationResult]:
        if not self.roles.actors:
            yield from self._offline_only()
            return
        n = len(self.roles.learners)
        for j in range(len(self.roles.actors)):
            self._submit(j)
        while self.pending or self.ready:
            while len(self.ready) < n and self.pending:
                self._complete_one()
            batch = [self.ready.popleft() for _ in range(min(n, len(self.ready)))]
            infos = [info for _, _, info in batch]
            steps_after = self.env_steps + sum(info["env_steps"] for info in infos)
            learners = self.roles.learners
            updates = [learners[r].update.remote(self.iteration + 1, steps_after,
                                                 *([batch[r][1]] if r < len(batch) else []))
                       for r in range(n)]
            self.env_steps = steps_after
            stats = {**learner_results(updates, self.on_wait)[0], "lost_rollouts": float(self.lost_rollouts),
                     "republished": float(self.republished)}
            self.iteration += 1
            if not self.eager:
                for j, _, _ in batch:
                    self._submit(j)
            yield IterationResult(self.iteration, self.env_steps, infos, stats,
                                  last=not self.pending and not self.ready)

    def _offline_only(self) -> Iterator[IterationResult]:
        """Updates with no rollout: the clock advances by what one rollout per learner would add
        (the last update may pass ``total_env_steps``, as an online run's last rollout does)."""
        learners, total = self.roles.learners, self.cfg.train.total_env_steps
        while self.env_steps < total:
            steps_after = self.env_steps + self.cfg.rollout_steps
            updates = [h.update.remote(self.iteration + 1, steps_after) for h in learners]
            self.env_steps = steps_after
            stats = learner_results(updates, self.on_wait)[0]
            self.iteration += 1
            yield IterationResult(self.iteration, self.env_steps, [], stats, last=self.env_steps >= total)
