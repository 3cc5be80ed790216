"""Recorded (offline) rows mixed into every batch at an exact share (RLPD's symmetric sampling).

The offline rows sit in a table of their own that online inserts never touch, so they are
never evicted however often the online table wraps. Every batch of ``B`` rows holds exactly
``round(ratio * B)`` offline rows, at evenly spaced positions among the online ones (not an
average over batches, as mixing at insert time gives), and a ``offline`` column saying which
rows are which, for per-source metrics. A column only one source has (the recorded rows'
``return_to_go``) is NaN in the other source's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from kilorl.algos.api import ReplaySource
from kilorl.algos.common.replay_table import RingTable
from kilorl.core import Rollout

SOURCE_COLUMN = "offline"
"""Bool column of a mixed batch: True where the row is recorded data."""


class RecordedRows(Protocol):
    """Where the recorded rows are sampled from: an ``OfflineTable`` in this process, or the
    store workers' immutable table (``kilorl.roles.store_offline``)."""

    def __len__(self) -> int: ...

    def sample(self, batch_size: int) -> dict[str, np.ndarray]: ...

    def rng_state(self) -> dict[str, Any] | None: ...

    def set_rng_state(self, state: dict[str, Any]) -> None: ...


class OfflineTable:
    """Immutable rows, sampled uniformly with replacement from a seeded generator."""

    def __init__(self, rows: Mapping[str, np.ndarray], seed: int) -> None:
        n = len(next(iter(rows.values())))
        if n == 0:
            raise ValueError("an offline table needs at least one row")
        schema = {k: (v.shape[1:], v.dtype) for k, v in rows.items()}
        self._table = RingTable(n, schema, seed)
        self._table.insert(rows)

    def __len__(self) -> int:
        return len(self._table)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        return self._table.sample(batch_size)

    def rng_state(self) -> dict[str, Any]:
        return self._table.rng.bit_generator.state

    def set_rng_state(self, state: dict[str, Any]) -> None:
        self._table.rng.bit_generator.state = state


def offline_positions(batch_size: int, ratio: float) -> np.ndarray:
    """Where the ``round(ratio * B)`` offline rows go in a batch of ``B``: evenly spaced."""
    k = round(ratio * batch_size)
    return np.floor((np.arange(k) + 0.5) * batch_size / max(k, 1)).astype(np.int64)


class MixedSource(ReplaySource):
    """The online table (the algorithm's adder inserts into it) and the offline rows, sampled
    at an exact per-batch split."""

    def __init__(self, online: ReplaySource, offline: RecordedRows, ratio: float) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"replay_buffer.offline.ratio must be in [0, 1], got {ratio}")
        self.online, self.offline, self.ratio = online, offline, ratio

    @property
    def inserted_env_steps(self) -> int:  # type: ignore[override]
        return self.online.inserted_env_steps

    def add(self, rollout: Rollout) -> None:
        self.online.add(rollout)

    def __len__(self) -> int:
        """Rows a batch can be drawn from: none until the online table has a row, unless every
        row of a batch is offline (``ratio`` 1)."""
        if len(self.online) == 0 and self.ratio < 1.0:
            return 0
        return len(self.online) + len(self.offline)

    def sample(self, batch_size: int, batches: int = 1) -> dict[str, np.ndarray]:
        """``batches`` batches of ``batch_size`` rows back to back, each with its exact share."""
        one = np.zeros(batch_size, bool)
        one[offline_positions(batch_size, self.ratio)] = True
        is_offline = np.tile(one, batches)
        k = int(is_offline.sum())
        off = self.offline.sample(k) if k else None
        on = self.online.sample(len(is_offline) - k) if k < len(is_offline) else None
        out = {}
        for name in dict.fromkeys([*(off or {}), *(on or {})]):
            first = (off if off is not None and name in off else on)[name]  # type: ignore[index]
            merged = np.empty((len(is_offline), *first.shape[1:]), first.dtype)
            for rows, where in ((off, is_offline), (on, ~is_offline)):
                if rows is not None:
                    merged[where] = rows[name] if name in rows else missing_value(first.dtype)
            out[name] = merged
        out[SOURCE_COLUMN] = is_offline
        return out

    def stats(self) -> dict[str, float]:
        return {**self.online.stats(), "offline_rows": float(len(self.offline))}


def missing_value(dtype: np.dtype) -> float | int:
    """What a row of one source holds in a column only the other source has (the recorded rows'
    ``return_to_go``): NaN in a float column, 0 otherwise."""
    return float("nan") if np.dtype(dtype).kind in "fc" else 0


def sample_batches(source: ReplaySource, batch_size: int, batches: int) -> dict[str, np.ndarray]:
    """``batches`` batches drawn at once (one gather per column); a mixed source keeps its
    exact share in each batch, not only over all of them."""
    if isinstance(source, MixedSource):
        return source.sample(batch_size, batches)
    return source.sample(batch_size * batches)
