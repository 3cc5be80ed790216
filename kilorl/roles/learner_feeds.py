"""The learner side of each data path: what a learner does with the rollouts it is handed
before (and while) its algorithm trains, and the source the algorithm pulls from.

- ``on_policy``: rollouts older than ``max_staleness`` are dropped, the rest merged along
  the env axis into one ``RolloutBatch``; if any rank is left with nothing every rank skips
  together (their all-reduces must match).
- ``replay``: rollouts go into the algorithm's own replay table (``make_replay_table``);
  the algorithm samples from it at the ratio its config sets. Nothing is stale here. Env
  runners that inserted into their node's shard themselves hand over a ``ReplayInsert``
  (counts only), which the feed counts and does not add.
- ``queue``: the rollouts that completed first, merged, lagged versions kept per column.

A third path registers here under its name (``FEEDS``) without changing the learner role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kilorl.algos import keys
from kilorl.algos.api import AlgorithmLearner, RolloutBatch
from kilorl.core import GradientComm, Rollout


def merge_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Concatenate env runners' rollouts along the env axis: ``steps`` on axis 1, ``last``,
    ``state`` and ``column_versions`` on axis 0, ``final`` with its env indices moved past the
    earlier rollouts' envs."""
    if len(rollouts) == 1:
        return rollouts[0]
    first = rollouts[0]
    offsets = np.cumsum([0] + [r.shape[1] for r in rollouts[:-1]])
    final: dict[str, np.ndarray] = {}
    for k in first.final:
        parts = [r.final[k] + off if k == keys.FINAL_ENV else r.final[k] for r, off in zip(rollouts, offsets)]
        final[k] = np.concatenate(parts, axis=0)
    return Rollout(
        steps={k: np.concatenate([r.steps[k] for r in rollouts], axis=1) for k in first.steps},
        last={k: np.concatenate([r.last[k] for r in rollouts], axis=0) for k in first.last},
        moments={k: [m for r in rollouts for m in r.moments.get(k, [])] for k in first.moments},
        version=min((r.version for r in rollouts if r.version is not None), default=None),
        final=final,
        state={k: np.concatenate([r.state[k] for r in rollouts], axis=0) for k in first.state},
        env_steps_before=min(r.env_steps_before for r in rollouts),
        column_versions=None if any(r.column_versions is None for r in rollouts)
        else np.concatenate([r.column_versions for r in rollouts]),
    )


def stale(rollouts: list[Rollout], trained_version: int, max_staleness: int) -> list[bool]:
    """Which rollouts were produced more than ``max_staleness`` versions before ``trained_version``."""
    return [r.version is not None and trained_version - r.version > max_staleness for r in rollouts]


class OnPolicyFeed:
    """Fresh rollouts of this iteration, merged; stale ones dropped and counted."""

    def __init__(self, algorithm: AlgorithmLearner, grad_comm: GradientComm, world: int, max_staleness: int) -> None:
        self.algorithm, self.grad_comm, self.world, self.max_staleness = algorithm, grad_comm, world, max_staleness

    def train(self, version: int, env_steps_total: int, rollouts: list[Rollout]) -> dict[str, float]:
        """The weights being trained are ``version - 1``; a rollout older than that by more
        than ``max_staleness`` is dropped (``stale_rollouts``)."""
        old = stale(rollouts, version - 1, self.max_staleness)
        fresh = [r for r, s in zip(rollouts, old) if not s]
        empty = self.grad_comm.average_scalars([float(not fresh)])[0] if self.world > 1 else float(not fresh)
        stats = {} if empty > 0 else self.algorithm.update(RolloutBatch(merge_rollouts(fresh)), env_steps_total)
        stats.update(stale_rollouts=float(sum(old)), skipped_update=float(empty > 0))
        return stats


class ReplayFeed:
    """Every rollout into the algorithm's replay table; the algorithm samples from it."""

    def __init__(self, algorithm: AlgorithmLearner, grad_comm: GradientComm, world: int, max_staleness: int) -> None:
        self.algorithm = algorithm
        self.table = algorithm.make_replay_table()
        self.actor_inserted_rows = 0
        """Rows env runners inserted into their nodes' shards themselves (``ReplayInsert``s handed here)."""

    def train(self, version: int, env_steps_total: int, rollouts: list[Any]) -> dict[str, float]:
        from kilorl.roles.store_replay import ReplayInsert

        for rollout in rollouts:
            if isinstance(rollout, ReplayInsert):  # already in the table: rows never came here
                self.actor_inserted_rows += rollout.rows
            else:
                self.table.add(rollout)
        stats = self.algorithm.update(self.table, env_steps_total)
        stats["replay_actor_inserted_rows"] = float(self.actor_inserted_rows)
        stats.setdefault("replay_rows", float(len(self.table)))
        stats.update(self.table.stats())
        return stats


class QueueFeed:
    """Every rollout handed over, merged, lag and all (the driver dropped those past
    ``algo.queue.max_policy_lag``); each env column keeps its version (``column_versions``)."""

    def __init__(self, algorithm: AlgorithmLearner, grad_comm: GradientComm, world: int, max_staleness: int) -> None:
        self.algorithm = algorithm

    def train(self, version: int, env_steps_total: int, rollouts: list[Rollout]) -> dict[str, float]:
        if not rollouts:
            raise ValueError("the queue data path handed this learner no rollout (shares must be equal)")
        stats = self.algorithm.update(RolloutBatch(merge_rollouts(rollouts)), env_steps_total)
        return stats


FEEDS: dict[str, Callable[..., Any]] = {"on_policy": OnPolicyFeed, "replay": ReplayFeed, "queue": QueueFeed}
"""Data path name -> the learner's feed for it."""


def make_feed(data_path: str, algorithm: AlgorithmLearner, grad_comm: GradientComm, world: int,
              max_staleness: int) -> OnPolicyFeed | ReplayFeed | QueueFeed:
    try:
        feed = FEEDS[data_path]
    except KeyError:
        raise ValueError(f"no learner feed for the {data_path!r} data path; known: {', '.join(sorted(FEEDS))}") from None
    return feed(algorithm, grad_comm, world, max_staleness)
