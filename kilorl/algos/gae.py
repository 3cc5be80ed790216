"""Generalized Advantage Estimation (Schulman et al., 2016), with time limits bootstrapped.

A truncated episode (a time limit) did not end its return: the value of its real final
observation stands in for the rest. A terminated one did end it. Both cut the recursion,
since the next row belongs to a new episode.
"""

from __future__ import annotations

import numpy as np

from kilorl.algos import keys
from kilorl.core import Rollout


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
    final_values: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns for arrays shaped ``[T, N]`` (time, env).

    ``last_values`` is V(s_T) for the observation after the final step; ``final_values``
    (``[T, N]``, read only where an episode ended) is V of each finished episode's real
    final observation, which bootstraps the truncated ones (None: no bootstrap, every
    truncation treated as a termination). Returns ``(advantages, returns)``.
    """
    T = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1:], dtype=np.float32)
    next_values = last_values.astype(np.float32)
    for t in range(T - 1, -1, -1):
        term, trunc = terminated[t].astype(bool), truncated[t].astype(bool)
        done = term | trunc
        bootstrap = trunc & ~term if final_values is not None else np.zeros_like(done)
        reward = rewards[t].astype(np.float32)
        if bootstrap.any():  # the time limit's value, folded in as one more discounted reward
            reward = reward.copy()
            reward[bootstrap] += gamma * final_values[t][bootstrap]
        not_done = 1.0 - done.astype(np.float32)
        delta = reward + gamma * next_values * not_done - values[t]
        last = delta + gamma * gae_lambda * not_done * last
        adv[t] = last
        next_values = values[t]
    return adv, adv + values.astype(np.float32)


def final_values_of(rollout: Rollout, key: str = keys.VALUES) -> np.ndarray | None:
    """``[T, N]`` with V of each finished episode's final observation where it ended (from the
    behaviour policy's ``observe`` extras in ``rollout.final``), zeros elsewhere; None when
    the rollout has no such values."""
    final = rollout.final
    if key not in final:
        return None
    out = np.zeros(rollout.shape, np.float32)
    out[final[keys.FINAL_T], final[keys.FINAL_ENV]] = final[key]
    return out


def rollout_gae(rollout: Rollout, gamma: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE of an actor-critic rollout: V per step, V(s_T) and V of the final observations
    as the behaviour policy recorded them."""
    steps = rollout.steps
    return compute_gae(steps[keys.REWARDS], steps[keys.VALUES], steps[keys.TERMINATED], steps[keys.TRUNCATED],
                       rollout.last[keys.LAST_VALUES], gamma, gae_lambda, final_values_of(rollout))
