"""The replay algorithms' adder (DQN, SAC): a rollout's step record as n-step transitions for
their replay tables.

Each row (t, n) of a ``[T, N]`` rollout becomes ``(obs, action, reward, next_obs, discount)``:
``reward`` sums up to ``n_step`` discounted rewards, stopping after the step where the
episode ended or at the rollout's end; ``next_obs`` is the observation after the last step
summed (the real final observation where an episode ended, s_T at the rollout's end);
``discount`` is ``gamma ** m`` (m steps summed), 0 after a termination. A truncation keeps
its discount: the time limit's final observation bootstraps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kilorl.algos import keys
from kilorl.algos.api import SAMPLE_WEIGHT, ReplaySource, ReplayStorage, ReplayStorageFactory
from kilorl.algos.common.replay_table import RingTable
from kilorl.core import Rollout

COLUMNS = ("obs", "action", "reward", "next_obs", "discount")
WEIGHT = SAMPLE_WEIGHT
REPLAY_PREFIX = "replay/"
"""Prefix of a learner-held table's columns among a checkpoint's named tensors."""


def nstep_transitions(rollout: Rollout, gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """Every ``(t, env)`` of ``rollout`` as one transition, rows in ``[T * N]`` order."""
    steps = rollout.steps
    obs, rewards = steps[keys.OBS], steps[keys.REWARDS]
    term, trunc = steps[keys.TERMINATED].astype(bool), steps[keys.TRUNCATED].astype(bool)
    T, N = rewards.shape
    done = term | trunc
    after = np.empty_like(obs)  # the observation after step t: next row, s_T, or a final observation
    after[:-1] = obs[1:]
    after[-1] = rollout.last[keys.OBS]
    final = rollout.final
    if len(final.get(keys.FINAL_T, ())):
        after[final[keys.FINAL_T], final[keys.FINAL_ENV]] = final[keys.OBS]
    t = np.arange(T)[:, None].repeat(N, 1)
    env = np.arange(N)[None, :].repeat(T, 0)
    ret = np.zeros((T, N), np.float64)
    end = t.copy()
    alive = np.ones((T, N), bool)
    for k in range(n_step):
        idx = t + k
        valid = alive & (idx < T)
        safe = np.minimum(idx, T - 1)
        ret += np.where(valid, (gamma ** k) * rewards[safe, env], 0.0)
        end = np.where(valid, idx, end)
        alive = valid & ~done[safe, env]
    m = end - t + 1
    discount = (gamma ** m) * (1.0 - term[end, env])
    return {
        "obs": obs.reshape(T * N, *obs.shape[2:]),
        "action": steps[keys.ACTIONS].reshape(T * N, *steps[keys.ACTIONS].shape[2:]),
        "reward": ret.astype(np.float32).reshape(-1),
        "next_obs": after[end, env].reshape(T * N, *obs.shape[2:]),
        "discount": discount.astype(np.float32).reshape(-1),
    }


def replay_rows(algo_cfg: Any, rollout: Rollout, stacked: bool = False) -> dict[str, np.ndarray]:
    """The adder's rows of ``rollout`` for an algorithm section with ``gamma`` and ``n_step``
    (what an env runner inserts into its node's shard itself); ``stacked``: the table keeps
    frame stacks, so each env's steps go in consecutively (their stacks overlap)."""
    rows = nstep_transitions(rollout, algo_cfg.gamma, algo_cfg.n_step)
    return env_major(rows, rollout) if stacked else rows


def env_major(rows: dict[str, np.ndarray], rollout: Rollout) -> dict[str, np.ndarray]:
    """Rows of ``[T * N]`` order put in ``[N * T]`` order: each env's steps consecutive."""
    T, N = rollout.steps[keys.REWARDS].shape
    order = np.arange(T * N).reshape(T, N).T.ravel()
    return {k: v[order] for k, v in rows.items()}


class TransitionTable(ReplaySource):
    """A table of n-step transitions (a ``RingTable`` here, or ``storage``'s, e.g. in the
    store workers); ``add`` is the adder."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype, gamma: float,
                 n_step: int, seed: int, storage: ReplayStorageFactory | None = None, name: str = "dqn",
                 action_shape: tuple[int, ...] = (), action_dtype: np.dtype | type = np.int64) -> None:
        schema = {"obs": (obs_shape, obs_dtype), "action": (action_shape, action_dtype), "reward": ((), np.float32),
                  "next_obs": (obs_shape, obs_dtype), "discount": ((), np.float32)}
        self.table: ReplayStorage = RingTable(capacity, schema, seed) if storage is None \
            else storage(name, schema, capacity, seed)
        self.gamma, self.n_step = gamma, n_step
        self.inserted_env_steps = 0

    def add(self, rollout: Rollout) -> None:
        rows = nstep_transitions(rollout, self.gamma, self.n_step)
        if getattr(self.table, "stacked", False):  # each env's steps consecutive: their stacks overlap
            rows = env_major(rows, rollout)
        self.table.insert(rows)
        self.inserted_env_steps += rollout.env_steps

    def __len__(self) -> int:
        return len(self.table)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Columns of ``[B, ...]``; from a prioritized table also ``weight`` (importance weights)."""
        return self.table.sample(batch_size)

    @property
    def prioritized(self) -> bool:
        """Whether samples carry importance weights and want their priorities back."""
        return getattr(self.table, "prioritized", None) is not None

    def update_priorities(self, td_errors: np.ndarray) -> None:
        """The last sample's rows, in order, get priorities from their |TD error|."""
        self.table.update_priorities(td_errors)  # type: ignore[attr-defined]

    def set_progress(self, progress: float) -> None:
        """Share of the run done (a prioritized table's importance exponent follows it)."""
        if hasattr(self.table, "progress"):
            self.table.progress = progress  # type: ignore[attr-defined]

    def sample_budget(self) -> int | None:
        """Rows the table's rate limiter admits now; None: no limiter (the algorithm's ratio rules)."""
        budget = getattr(self.table, "sample_budget", None)
        return budget() if callable(budget) else None

    @property
    def min_size_to_sample(self) -> int:
        """Rows the table must hold before it serves a sample."""
        return int(getattr(self.table, "min_size_to_sample", 1))

    def stats(self) -> dict[str, float]:
        stats = getattr(self.table, "stats", None)  # a store table reports its own; a RingTable none
        return stats() if callable(stats) else {}


def table_state(table: TransitionTable | None, meta: dict[str, Any]) -> dict[str, Any]:
    """A learner-held table's columns as checkpoint tensors (``replay/<column>``), its counters
    into ``meta["replay"]``; a table in the store workers stays there, and ``meta["replay_table"]``
    names it (the table a resumed run finds again)."""
    import torch

    if table is not None and isinstance(getattr(table.table, "name", None), str):
        meta["replay_table"] = table.table.name  # type: ignore[attr-defined]
    if table is None or not isinstance(table.table, RingTable):
        return {}
    arrays, table_meta = table.table.state()
    meta["replay"] = {**table_meta, "inserted_env_steps": table.inserted_env_steps}
    return {REPLAY_PREFIX + k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def load_table_state(table: TransitionTable | None, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
    """Restore what ``table_state`` saved into a learner-held ``table``."""
    if "replay" not in meta or table is None or not isinstance(table.table, RingTable):
        return
    arrays = {k[len(REPLAY_PREFIX):]: np.asarray(v) for k, v in tensors.items() if k.startswith(REPLAY_PREFIX)}
    table.table.load(arrays, meta["replay"])
    table.inserted_env_steps = int(meta["replay"]["inserted_env_steps"])
