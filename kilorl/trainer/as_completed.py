"""What the ``replay`` and ``queue`` data paths share: rollouts collected one env runner at a
time and taken as they complete, with lost ones collected again.

A rollout whose env runner died (Ray restarts it) is collected again from the restarted one
and counted in ``lost_rollouts``; one whose store worker restarted empty (``ParametersLost``)
makes learner 0 republish the current version, and is collected again. Both within
``train.restart_timeout_s`` of the runner's first failure and ``ACTOR_MAX_RESTARTS`` per runner.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from kilorl.config import Config
from kilorl.core import RolloutInfo
from kilorl.params.reconnect import ParametersLost
from kilorl.trainer.loop_errors import note_restart_timeout
from kilorl.trainer.session import ACTOR_MAX_RESTARTS, RoleSession
from kilorl.trainer.waiting import WaitHook, wait_some

Completed = tuple[int, Any, RolloutInfo]
"""(env runner, rollout ref, its info)."""


class AsCompleted:
    """Collections under way (``pending``) and completed rollouts not yet trained on (``ready``)."""

    def __init__(self, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> None:
        self.cfg, self.roles = cfg, roles
        self.iteration, self.env_steps = iteration, env_steps
        self.first_version = iteration
        self.per_rollout = cfg.parallelism.envs_per_actor * cfg.algo.rollout_length
        self.pending: dict[Any, tuple[int, Any]] = {}
        """info ref -> (env runner, rollout ref) of the collections under way."""
        self.ready: deque[Completed] = deque()
        self.lost_rollouts = self.republished = 0
        self.max_lost = cfg.parallelism.actor * ACTOR_MAX_RESTARTS
        self.on_wait: WaitHook | None = None
        """Called while the loop waits for a rollout (kilorl.trainer.waiting): the migrator's round."""
        self.restarting: set[int] = set()
        """Env runners whose last rollout was lost and that have not completed one since."""
        self.failed_at: dict[int, float] = {}
        """Env runner -> when its rollout was first lost since its last completed one: its
        ``train.restart_timeout_s`` runs from there."""

    def in_flight(self, actor: int) -> list[Any]:
        return [info for info, (j, _) in self.pending.items() if j == actor]

    def _room(self) -> bool:
        """Another rollout still fits in the run's env-step budget."""
        taken = self.env_steps + (len(self.pending) + len(self.ready)) * self.per_rollout
        return taken < self.cfg.train.total_env_steps

    def _collect(self, j: int, min_version: int) -> None:
        """Ask env runner ``j`` for a rollout; its step clock counts the rollouts already waiting."""
        clock = self.env_steps + len(self.ready) * self.per_rollout
        rollout_ref, info_ref = self.roles.actors[j].collect.options(num_returns=2).remote(min_version, clock)
        self.pending[info_ref] = (j, rollout_ref)

    def _submit(self, j: int) -> None:
        raise NotImplementedError

    def _next_completed(self) -> Completed | None:
        """The next rollout to complete; None when it was lost (and is being collected again)."""
        import ray

        done = wait_some(list(self.pending), self.on_wait, updating=False)[0]
        j, rollout_ref = self.pending.pop(done)
        timeout_s = self.cfg.train.restart_timeout_s
        try:
            info = ray.get(done)
            self.restarting.discard(j)
            self.failed_at.pop(j, None)
            return j, rollout_ref, info
        except ParametersLost as err:  # the env runner's store worker restarted empty: republish, collect again
            if time.monotonic() - self.failed_at.setdefault(j, time.monotonic()) > timeout_s:
                note_restart_timeout(err, timeout_s)
                raise
            self.republished += 1
            ray.get(self.roles.learners[0].publish.remote(self.iteration))
        except ray.exceptions.RayActorError as err:  # died mid-rollout, or still restarting
            if j not in self.restarting:  # one lost rollout, however many tries the restart takes
                self.restarting.add(j)
                self.lost_rollouts += 1
            if self.lost_rollouts > self.max_lost:
                raise
            if time.monotonic() - self.failed_at.setdefault(j, time.monotonic()) > timeout_s:
                note_restart_timeout(err, timeout_s)
                raise
            time.sleep(0.1)
        self._submit(j)
        return None
