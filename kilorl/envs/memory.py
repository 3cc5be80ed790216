"""Memory tasks: environments a memoryless policy cannot solve from one observation.

``CartPoleNoVelocity`` is CartPole with the velocities hidden (SB3-contrib's and rl-zoo's
``CartPoleNoVel``): obs[1] (cart velocity) and obs[3] (pole angular velocity) are zeroed, so
the observation keeps CartPole's shape and bounds and a policy must infer the velocities from
the observations it remembers. Used as ``env.id: kilorl.envs.memory:CartPoleNoVelocity``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

HIDDEN = (1, 3)
"""Indices of the observation that are zeroed: the cart's and the pole's velocities."""


class CartPoleNoVelocity(CartPoleEnv):
    """CartPole-v1 (500-step episodes when made with ``env.max_episode_steps: 500``) with the
    velocities hidden."""

    def _masked(self, obs: np.ndarray) -> np.ndarray:
        obs = np.array(obs, np.float32)
        obs[list(HIDDEN)] = 0.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return self._masked(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._masked(obs), reward, terminated, truncated, info
