"""The one protocol the trainer, the reporter, the migrator and resume talk to, whichever data
path the algorithm's spec names (``AlgorithmSpec.data_path``).

A data path is an iterator of ``IterationResult``: one per learner update (one published
version). It owns when env runners collect and what the learners are handed; it exposes the
counters a checkpoint keeps (``iteration``, ``env_steps``, ``lost_rollouts``) and the refs of
one env runner's work in flight (what a migration waits for). ``on_policy`` and ``replay``
and ``queue`` (rollouts consumed as they complete, lag kept as data) ship; another registers
in ``DATA_PATHS`` and in the learner's ``FEEDS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kilorl.core import RolloutInfo

if TYPE_CHECKING:
    from kilorl.config import Config
    from kilorl.trainer.session import RoleSession
    from kilorl.trainer.waiting import WaitHook


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


class DataPath(Protocol):
    """How experience reaches the learners, one iteration at a time."""

    iteration: int
    """The newest published version."""
    env_steps: int
    """Env steps trained on so far (a lost rollout's steps are never counted)."""
    lost_rollouts: int
    """Rollouts lost with their env runner and collected again."""
    on_wait: WaitHook | None
    """Called while the data path waits for rollouts or updates (kilorl.trainer.waiting)."""

    def __iter__(self) -> Iterator[IterationResult]: ...

    def in_flight(self, actor: int) -> list[Any]:
        """Refs of env runner ``actor``'s rollouts submitted and not yet trained on."""


DATA_PATHS: dict[str, str] = {
    "on_policy": "kilorl.trainer.loop:OnPolicyLoop",
    "replay": "kilorl.trainer.replay_loop:ReplayLoop",
    "queue": "kilorl.trainer.queue_loop:QueueLoop",
}
"""Data path name -> ``module:Class`` built as ``Class(cfg, roles, iteration, env_steps)``."""


def make_data_path(name: str, cfg: Config, roles: RoleSession, iteration: int, env_steps: int) -> DataPath:
    try:
        target = DATA_PATHS[name]
    except KeyError:
        raise ValueError(f"unknown data path {name!r}; this trainer has: {', '.join(sorted(DATA_PATHS))}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(cfg, roles, iteration, env_steps)
