"""The ``on_policy`` data path: rollouts per version, pipelined ``pipeline_depth`` deep.

Iteration ``i`` trains on rollouts collected with parameters at least version
``i - pipeline_depth`` and publishes version ``i + 1``; with depth 0 actors and learners
alternate, with depth >= 1 actors collect the next rollout while the learners train.
Nothing here knows which algorithm runs: it moves ``Rollout`` refs and statistics.
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
from kilorl.trainer.loop_errors import LearnerLost, note_restart_timeout
from kilorl.trainer.session import ACTOR_MAX_RESTARTS, RoleSession
from kilorl.trainer.waiting import WaitHook, wait_some

__all__ = ["IterationResult", "OnPolicyLoop", "learner_results"]

class OnPolicyLoop:
    """Feeds whole rollouts to the learners; actor ``j`` goes to learner ``j % learners``."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        self.cfg, self.roles = cfg, roles
        self.iteration, self.env_steps = iteration, env_steps
        self.first_version = iteration
        self.next_collect = iteration
        self.pending: deque[tuple[list[Any], list[Any], int]] = deque()
        self.lost_rollouts = 0
        """Rollouts lost with their actor and collected again (their steps are never counted)."""
        self.max_lost = cfg.parallelism.actor * ACTOR_MAX_RESTARTS
        self.restart_timeout_s = cfg.train.restart_timeout_s
        """How long a batch slot waits for its lost rollout, from its first failure (``train.restart_timeout_s``)."""
        self.republished = 0
        """Times the current version was published again because a store worker lost it."""
        self.on_wait: WaitHook | None = None
        """Called while the loop waits (kilorl.trainer.waiting): the migrator's round."""
        self._resolving: list[Any] = []
        """Info refs of the batch being resolved (taken off ``pending``, still in flight)."""

    def _submit(self) -> None:
        min_version = max(self.first_version, self.next_collect - self.cfg.train.pipeline_depth)
        refs = [a.collect.options(num_returns=2).remote(min_version, self.env_steps) for a in self.roles.actors]
        self.pending.append(([r[0] for r in refs], [r[1] for r in refs], min_version))
        self.next_collect += 1

    def _resolve(self, rollout_refs: list[Any], info_refs: list[Any], min_version: int) -> list[RolloutInfo]:
        """Every actor's rollout info; an actor that died mid-rollout is collected again.

        Ray restarts a dead actor (``max_restarts``); its partial rollout died with it and is
        never counted: the same batch slot is filled by a fresh rollout from the restarted
        actor, which takes the newest version >= ``min_version``. Bounded by ``max_lost``.
        """
        import ray

        infos: list[RolloutInfo | None] = [None] * len(info_refs)
        self._resolving = info_refs  # the same list: a slot collected again is seen by in_flight too
        failed_at: dict[int, float] = {}
        """Batch slot -> when it first failed: its restart wait runs from there."""
        while any(i is None for i in infos):
            slots = {info_refs[j]: j for j in range(len(infos)) if infos[j] is None}
            for ref in wait_some(list(slots), self.on_wait, updating=False):
                j = slots[ref]
                try:
                    infos[j] = ray.get(ref)
                    continue
                except ParametersLost as err:  # the actor's store worker restarted empty: republish, collect again
                    if time.monotonic() - failed_at.setdefault(j, time.monotonic()) > self.restart_timeout_s:
                        note_restart_timeout(err, self.restart_timeout_s)
                        raise
                    self.republished += 1
                    ray.get([h.publish.remote(self.iteration) for h in self.roles.rank_zeros()])
                except ray.exceptions.RayActorError as err:  # died mid-rollout, restarted in place, or still restarting
                    if j not in failed_at:
                        failed_at[j] = time.monotonic()
                        self.lost_rollouts += 1
                        if self.lost_rollouts > self.max_lost:
                            raise
                    if time.monotonic() - failed_at[j] > self.restart_timeout_s:
                        note_restart_timeout(err, self.restart_timeout_s)
                        raise
                    time.sleep(0.1)
                again = self.roles.actors[j].collect.options(num_returns=2).remote(min_version, self.env_steps)
                rollout_refs[j], info_refs[j] = again[0], again[1]
        self._resolving = []
        return infos  # type: ignore[return-value]

    def in_flight(self, actor: int) -> list[Any]:
        """Refs of actor ``actor``'s rollouts submitted and not yet consumed (what a migration waits for)."""
        resolving = [self._resolving[actor]] if self._resolving else []
        return resolving + [info_refs[actor] for _, info_refs, _ in self.pending]

    def _room(self) -> bool:
        """Another rollout still fits in the run's env-step budget."""
        in_flight = self.env_steps + len(self.pending) * self.cfg.rollout_steps
        return in_flight < self.cfg.train.total_env_steps

    def __iter__(self) -> Iterator[IterationResult]:

        while len(self.pending) <= self.cfg.train.pipeline_depth and self._room():
            self._submit()
        learners, n = self.roles.learners, len(self.roles.learners)
        while self.pending:
            rollout_refs, info_refs, min_version = self.pending.popleft()
            infos = self._resolve(rollout_refs, info_refs, min_version)
            steps_after = self.env_steps + self.cfg.rollout_steps
            # several policies: a group of k ranks per policy, rank r taking its policy's part of runners j = r (mod k)
            k = self.cfg.parallelism.learner if self.roles.learners_per_policy else n
            updates = [learners[i].update.remote(self.iteration + 1, steps_after, *rollout_refs[i % k::k])
                       for i in range(n)]
            self.env_steps = steps_after  # counted before _room: the rollout is consumed
            if self._room():
                self._submit()
            results = learner_results(updates, self.on_wait)
            stats = {**merge_policy_stats(results[::k]), "lost_rollouts": float(self.lost_rollouts),
                     "republished": float(self.republished)}
            self.iteration += 1
            yield IterationResult(self.iteration, self.env_steps, infos, stats, last=not self.pending)


def learner_results(refs: list[Any], on_wait: WaitHook | None = None) -> list[dict[str, float]]:
    """Every learner's update stats; the first learner that died becomes ``LearnerLost``.

    Waits on whichever finishes first, so a dead rank is seen at once, not after the
    survivors' all-reduce times out; ``on_wait`` runs meanwhile, told an update is in flight.
    """
    import ray

    rank = {ref: r for r, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        for ref in wait_some(pending, on_wait, updating=True):
            pending.remove(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                raise LearnerLost(f"learner {rank[ref]} died ({type(err).__name__})") from err
    return ray.get(refs)


def merge_policy_stats(results: list[dict[str, float]]) -> dict[str, float]:
    """One row from the rank 0 of each learner group (one group, or one per policy): several
    policies' ``<stat>/<policy>`` entries side by side, update and publish time the slowest group's."""
    out: dict[str, float] = {}
    for stats in results:
        for key, value in stats.items():
            out[key] = max(out.get(key, value), value) if key in ("learner_update_s", "publish_s") else value
    return out
