"""The ``queue`` data path: rollouts consumed as they complete, lag kept as data.

Each env runner's next collection is submitted the moment its previous one completes, and it
takes the newest published version without waiting. A learner batch is the first
``algo.queue.rollouts_per_batch`` rollouts to complete, dealt in equal shares to the learner
ranks. Completed rollouts waiting for a learner are bounded by
``algo.queue.max_queued_rollouts``: past it, a runner that completes is not resubmitted until
the queue drains (``queue_pauses`` counts it). A rollout more than
``algo.queue.max_policy_lag`` versions behind the version being trained is dropped
(``lag_dropped``) and its steps never counted. Every row reports the batch's lag (min, mean,
max). A slow env runner delays only its own rollouts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from kilorl.config import Config
from kilorl.trainer.as_completed import AsCompleted, Completed
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.loop import RESTART_WAIT_S, learner_results
from kilorl.trainer.session import RoleSession


class QueueLoop(AsCompleted):
    """As-completed batches to the learners; env runners never wait for the learner."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        super().__init__(cfg, roles, iteration, env_steps)
        q = cfg.algo.queue
        self.per_batch, self.max_queued, self.max_lag = q.rollouts_per_batch, q.max_queued_rollouts, q.max_policy_lag
        self.paused: list[int] = []
        """Env runners whose rollout completed while the queue was full: resubmitted as it drains."""
        self.pauses = self.dropped = 0

    def _submit(self, j: int) -> None:
        if not self._room():
            return
        if len(self.ready) >= self.max_queued:
            self.paused.append(j)
            self.pauses += 1
            return
        self._collect(j, self.first_version)  # the newest version, whatever it is: never a wait

    def _complete_one(self, deadline: float) -> None:
        done = self._next_completed(deadline)
        if done is None:
            return
        if self.iteration - done[2]["version"] > self.max_lag:  # too far behind to learn from
            self.dropped += 1
        else:
            self.ready.append(done)
        self._submit(done[0])

    def _batch(self) -> list[Completed]:
        deadline = time.monotonic() + RESTART_WAIT_S
        while len(self.ready) < self.per_batch and self.pending:
            self._complete_one(deadline)
        take = min(self.per_batch, len(self.ready))
        if take < self.per_batch:  # the budget's last rollouts: equal shares, or none (never counted)
            take -= take % len(self.roles.learners)
        batch = [self.ready.popleft() for _ in range(take)]
        for j in [j for j in self.paused]:  # the queue drained: paused runners go on
            if len(self.ready) < self.max_queued:
                self.paused.remove(j)
                self._submit(j)
        return batch

    def __iter__(self) -> Iterator[IterationResult]:
        for j in range(len(self.roles.actors)):
            self._submit(j)
        n = len(self.roles.learners)
        while self.pending or self.ready:
            batch = self._batch()
            if not batch:
                break
            infos = [info for _, _, info in batch]
            lags = [self.iteration - info["version"] for info in infos]
            steps_after = self.env_steps + sum(info["env_steps"] for info in infos)
            refs = [ref for _, ref, _ in batch]
            share = -(-len(refs) // n)
            updates = [learner.update.remote(self.iteration + 1, steps_after, *refs[r * share:(r + 1) * share])
                       for r, learner in enumerate(self.roles.learners)]
            self.env_steps = steps_after
            stats = {**learner_results(updates, self.on_wait)[0], "lost_rollouts": float(self.lost_rollouts),
                     "republished": float(self.republished), "queue_pauses": float(self.pauses),
                     "lag_dropped": float(self.dropped), "policy_lag_min": float(min(lags)),
                     "policy_lag_max": float(max(lags)), "queued_rollouts": float(len(self.ready))}
            self.iteration += 1
            yield IterationResult(self.iteration, self.env_steps, infos, stats, last=not self.pending and not self.ready)
