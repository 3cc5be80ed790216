"""A sum tree over a fixed number of slots, updated and sampled a whole batch at a time.

Leaves hold the slots' weights, every inner node the sum of its two children. Updating K
leaves recomputes their ancestors one level at a time (log2(n) numpy steps, whatever K is);
sampling B values descends all B paths together. No Python loop runs per item.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """``capacity`` non-negative weights; ``find`` maps points of [0, total) to slots."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.leaves = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.leaves.bit_length() - 1
        self.tree = np.zeros(2 * self.leaves, np.float64)
        """Node 1 is the root; node i's children are 2i and 2i + 1; leaves start at ``leaves``."""

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + np.asarray(slots, np.int64)]

    def set(self, slots: np.ndarray, weights: np.ndarray) -> None:
        """Sets the weights of ``slots`` (a repeated slot takes its last weight)."""
        slots = np.asarray(slots, np.int64)
        weights = np.asarray(weights, np.float64)
        if slots.size == 0:
            return
        if np.any(weights < 0) or not np.all(np.isfinite(weights)):
            raise ValueError("sum tree weights must be finite and >= 0")
        nodes = self.leaves + slots
        self.tree[nodes] = weights
        nodes = np.unique(nodes >> 1)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, points: np.ndarray) -> np.ndarray:
        """The slot whose cumulative-weight interval holds each point (points in [0, total))."""
        u = np.asarray(points, np.float64).copy()
        idx = np.ones(u.shape, np.int64)
        for _ in range(self.depth):
            left = self.tree[2 * idx]
            right = u >= left
            u -= np.where(right, left, 0.0)
            idx = 2 * idx + right
        slots = idx - self.leaves
        # float rounding can land a point past the last non-zero leaf: step back to one
        bad = self.tree[idx] <= 0
        if np.any(bad):
            slots[bad] = self._nonzero_at_or_before(slots[bad])
        return slots

    def _nonzero_at_or_before(self, slots: np.ndarray) -> np.ndarray:
        nz = np.flatnonzero(self.tree[self.leaves:self.leaves + self.capacity] > 0)
        if nz.size == 0:
            raise ValueError("sampling from a sum tree whose weights are all zero")
        pos = np.searchsorted(nz, slots, side="right") - 1
        return nz[np.maximum(pos, 0)]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` slots drawn independently with probability weight / total."""
        total = self.total
        if total <= 0:
            raise ValueError("sampling from a sum tree whose weights are all zero")
        points = rng.random(n) * total
        return self.find(np.minimum(points, np.nextafter(total, 0)))
