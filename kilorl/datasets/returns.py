"""Returns-to-go of recorded episodes: what Cal-QL-style methods calibrate their Q-values against.

Step ``t`` of an episode of ``T`` recorded rewards gets ``sum_{k=t}^{T-1} gamma ** (k - t) * r_k``.
Nothing is bootstrapped past the last recorded step: for an episode that terminated this is
its Monte Carlo return; for one that was truncated (a time limit, or a recording cut short)
it is the return of the steps recorded only, lower in magnitude than the full return would
be near the cut. Which rows are cut short can be read from the episode's ``truncations``.
"""

from __future__ import annotations

import numpy as np


def returns_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """The discounted sum of each step's reward and those after it, in float64, for one episode."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: must be in [0, 1], got {gamma}")
    r = np.asarray(rewards, np.float64)
    out = np.empty_like(r)
    acc = 0.0
    for t in range(len(r) - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out
