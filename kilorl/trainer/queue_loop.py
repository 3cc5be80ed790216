"""The ``queue`` data path: rollouts consumed as they complete, lag kept as data.

Each env runner's next collection is submitted the moment its previous one completes, and it
takes the newest published version without waiting. A learner batch is the first
``algo.queue.rollouts_per_batch`` rollouts to complete, dealt in equal shares to the learner
ranks. Completed rollouts waiting for a learner are bounded by
``algo.queue.max_queued_rollouts``: past it, a runner that completes is not resubmitted until
the queue drains (``queue_pauses`` counts it), so at most ``max_queued_rollouts + actor - 1``
rollouts are held, however slow the learners. Completions are taken while the learners train,
so a runner never waits for an update. With ``algo.queue.refresh_every_steps`` a runner also
takes newer versions mid-rollout, so a step acts with the newest version published before it.
A rollout whose first step is more than ``algo.queue.max_policy_lag`` versions behind the
version being trained is dropped (``lag_dropped``) and its steps never counted. Every row
reports the batch's lag (min, mean, max; over steps when runners refresh, each step at the
version it acted with), and per env runner ``j`` the rollouts trained on so far
(``rollouts_actor{j}``) and the mean lag of its steps in the batch (``policy_lag_actor{j}``,
when it has one there). A slow env runner delays only its own rollouts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from kilorl.config import Config
from kilorl.core import step_lags
from kilorl.trainer.as_completed import AsCompleted, Completed
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.loop import learner_results
from kilorl.trainer.session import RoleSession
from kilorl.trainer.waiting import wait_some


class QueueLoop(AsCompleted):
    """As-completed batches to the learners; env runners never wait for the learner."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        super().__init__(cfg, roles, iteration, env_steps)
        q = cfg.algo.queue
        self.per_batch, self.max_queued, self.max_lag = q.rollouts_per_batch, q.max_queued_rollouts, q.max_policy_lag
        self.paused: list[int] = []
        """Env runners whose rollout completed while the queue was full: resubmitted as it drains."""
        self.idle: list[int] = []
        """Env runners left without a collection because the budget was taken: resubmitted when a
        dropped rollout gives its steps back (else the run would end short of its budget)."""
        self.pauses = self.dropped = 0
        self.trained = [0] * len(roles.actors)
        """Rollouts trained on, per env runner: how a slow runner's share shows."""

    def in_flight(self, actor: int) -> list[Any]:
        """Its collections under way and its completed rollouts still queued for a learner."""
        return super().in_flight(actor) + [ref for j, ref, _ in self.ready if j == actor]

    def _submit(self, j: int) -> None:
        if not self._room():
            self.idle.append(j)
            return
        if len(self.ready) >= self.max_queued:
            self.paused.append(j)
            self.pauses += 1
            return
        self._collect(j, self.first_version)  # the newest version, whatever it is: never a wait

    def _complete_one(self) -> None:
        done = self._next_completed()
        if done is None:
            return
        self.ready.append(done)
        self._submit(done[0])

    def _batch(self) -> list[Completed]:
        while True:
            while len(self.ready) < self.per_batch and self.pending:
                self._complete_one()
            fresh = [c for c in self.ready if self.iteration - c[2]["version"] <= self.max_lag]
            self.dropped += len(self.ready) - len(fresh)  # too far behind the version they would train
            self.ready = deque(fresh)
            self._resume_paused()  # nothing is taken yet: the budget counts every rollout held
            if len(self.ready) >= self.per_batch or not self.pending:
                break
        take = min(self.per_batch, len(self.ready))
        if take < self.per_batch:  # the budget's last rollouts: equal shares, or none (never counted)
            take -= take % len(self.roles.learners)
        return [self.ready.popleft() for _ in range(take)]

    def _resume_paused(self) -> None:
        """The queue drained, or a dropped rollout gave budget back: paused and idle runners go on
        (after the batch's steps are counted, so the budget holds)."""
        for j in list(self.idle):
            if self._room():
                self.idle.remove(j)
                self._submit(j)
        for j in list(self.paused):
            if len(self.ready) < self.max_queued:
                self.paused.remove(j)
                self._submit(j)

    def _collect_during(self, updates: list[Any]) -> None:
        """While the learners train, completed rollouts are queued and their runners resubmitted:
        a runner never waits for an update, only for room in the queue."""
        import ray

        while self.pending:
            training = ray.wait(updates, num_returns=len(updates), timeout=0)[1]
            if not training:
                return
            ready = wait_some(list(self.pending) + training, self.on_wait, updating=True)
            if any(ref in training for ref in ready):
                return  # learner_results waits for the rest (and names a dead rank)
            self._complete_one()

    def _stats(self, batch: list[Completed]) -> dict[str, float]:
        """The driver's counters and the batch's lag, overall and per env runner."""
        lags: dict[int, list[int]] = {}
        for j, _, info in batch:
            lags.setdefault(j, []).extend(step_lags(info, self.iteration))  # per step, when runners refresh
            self.trained[j] += 1
        every = [lag for per_actor in lags.values() for lag in per_actor]
        stats = {"lost_rollouts": float(self.lost_rollouts), "republished": float(self.republished),
                 "queue_pauses": float(self.pauses), "lag_dropped": float(self.dropped),
                 "policy_lag_min": float(min(every)), "policy_lag_max": float(max(every)),
                 "queued_rollouts": float(len(self.ready))}
        stats.update({f"rollouts_actor{j}": float(n) for j, n in enumerate(self.trained)})
        stats.update({f"policy_lag_actor{j}": sum(v) / len(v) for j, v in sorted(lags.items())})
        return stats

    def __iter__(self) -> Iterator[IterationResult]:
        for j in range(len(self.roles.actors)):
            self._submit(j)
        n = len(self.roles.learners)
        while self.pending or self.ready:
            batch = self._batch()
            if not batch:
                break
            infos = [info for _, _, info in batch]
            steps_after = self.env_steps + sum(info["env_steps"] for info in infos)
            refs = [ref for _, ref, _ in batch]
            share = -(-len(refs) // n)
            updates = [learner.update.remote(self.iteration + 1, steps_after, *refs[r * share:(r + 1) * share])
                       for r, learner in enumerate(self.roles.learners)]
            self.env_steps = steps_after
            self._resume_paused()
            self._collect_during(updates)
            stats = {**learner_results(updates, self.on_wait)[0], **self._stats(batch)}
            self.iteration += 1
            yield IterationResult(self.iteration, self.env_steps, infos, stats, last=not self.pending and not self.ready)
