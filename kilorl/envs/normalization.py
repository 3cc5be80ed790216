"""Running statistics for observation and reward normalization.

Actors normalize with the statistics published alongside the weights and send back the
raw moments of what they saw; the learner merges them (Chan et al.'s parallel variance)
and publishes the result with the next version, so every actor uses the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Moments:
    """Mean, variance and count of a batch; mergeable across processes."""

    mean: np.ndarray
    var: np.ndarray
    count: float

    @classmethod
    def of(cls, x: np.ndarray, feature_shape: tuple[int, ...] = ()) -> Moments:
        """Moments over every leading axis of ``x``, keeping ``feature_shape``."""
        flat = np.asarray(x, np.float64).reshape(-1, *feature_shape)
        return cls(flat.mean(0), flat.var(0), float(flat.shape[0]))


class RunningMeanStd:
    """Streaming mean/variance; ``update`` merges the moments of a new batch."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, m: Moments) -> None:
        if m.count <= 0:
            return
        delta = m.mean.reshape(self.mean.shape) - self.mean
        total = self.count + m.count
        new_mean = self.mean + delta * m.count / total
        m2 = self.var * self.count + m.var.reshape(self.var.shape) * m.count + delta**2 * self.count * m.count / total
        self.mean, self.var, self.count = new_mean, m2 / total, total

    def state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array([self.count], np.float64)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.mean = np.asarray(state["mean"], np.float64).reshape(self.mean.shape)
        self.var = np.asarray(state["var"], np.float64).reshape(self.var.shape)
        self.count = float(np.asarray(state["count"]).reshape(-1)[0])


def normalize(x: np.ndarray, mean: np.ndarray, var: np.ndarray, clip: float) -> np.ndarray:
    return np.clip((x - mean) / np.sqrt(var + 1e-8), -clip, clip).astype(np.float32)
