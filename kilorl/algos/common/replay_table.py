"""A replay table in the learner's process: fixed-schema numpy columns, FIFO at capacity,
uniform samples from a seeded generator, and a checkpoint of all of it.

Columns are preallocated rings, so an insert is one slice copy per column and a sample one
fancy-index gather per column: no Python loop per row. The replay-service issue moves tables
into the store workers behind the same calls (``add`` / ``sample`` / ``len``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


class RingTable:
    """``capacity`` rows of named columns (``schema``: name -> (row shape, dtype))."""

    def __init__(self, capacity: int, schema: Mapping[str, tuple[tuple[int, ...], Any]], seed: int) -> None:
        self.capacity = capacity
        self.columns = {name: np.zeros((capacity, *shape), dtype) for name, (shape, dtype) in schema.items()}
        self.pos = 0
        """Row the next insert writes first."""
        self.size = 0
        self.inserted = 0
        """Rows inserted over the table's life (evicted ones included)."""
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def __len__(self) -> int:
        return self.size

    def insert(self, rows: Mapping[str, np.ndarray]) -> None:
        """Append ``rows`` (every column, ``[K, ...]``); the oldest rows go past capacity."""
        if set(rows) != set(self.columns):
            raise ValueError(f"replay insert: columns {sorted(rows)} do not match the table's {sorted(self.columns)}")
        k = len(next(iter(rows.values())))
        if k > self.capacity:  # only the newest rows would survive anyway
            rows = {name: v[-self.capacity:] for name, v in rows.items()}
            k = self.capacity
        idx = (self.pos + np.arange(k)) % self.capacity
        for name, column in self.columns.items():
            column[idx] = rows[name]
        self.pos = int((self.pos + k) % self.capacity)
        self.size = min(self.capacity, self.size + k)
        self.inserted += k

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` rows drawn uniformly with replacement."""
        if self.size == 0:
            raise ValueError("replay sample from an empty table")
        idx = self.rng.integers(0, self.size, size=batch_size)
        return {name: column[idx] for name, column in self.columns.items()}

    # ---- checkpoint ---------------------------------------------------------------------
    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, meta)``: the filled rows of every column, and the counters and RNG state."""
        arrays = {name: column[: self.size] for name, column in self.columns.items()}
        meta = {"pos": self.pos, "size": self.size, "inserted": self.inserted, "rng": self.rng.bit_generator.state}
        return arrays, meta

    def load(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        size = int(meta["size"])
        for name, column in self.columns.items():
            column[:size] = np.asarray(arrays[name])
        self.pos, self.size, self.inserted = int(meta["pos"]), size, int(meta["inserted"])
        self.rng.bit_generator.state = meta["rng"]
