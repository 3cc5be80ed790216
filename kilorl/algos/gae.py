"""Generalized Advantage Estimation (Schulman et al., 2016)."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns for arrays shaped [T, N] (time, env).

    ``dones[t]`` is 1 when the episode ended at step t (terminated or truncated); the
    value after a truncation is folded into ``rewards`` by the actor (bootstrap), so
    here every done cuts the recursion. ``last_values`` is V(s_T) for the state after
    the final step. Returns ``(advantages, returns)`` with returns = advantages + values.
    """
    T = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1:], dtype=np.float32)
    next_values = last_values.astype(np.float32)
    for t in range(T - 1, -1, -1):
        not_done = 1.0 - dones[t].astype(np.float32)
        delta = rewards[t] + gamma * next_values * not_done - values[t]
        last = delta + gamma * gae_lambda * not_done * last
        adv[t] = last
        next_values = values[t]
    return adv, adv + values.astype(np.float32)
