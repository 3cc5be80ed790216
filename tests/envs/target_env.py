"""A one-step continuous-control task with a known optimum, for SAC's training tests.

Each episode is one step: the observation is a target ``x`` in ``[-1, 1]``, the action space
``Box(-2, 2)``, the reward ``-(a - 2x)^2``. The best policy earns 0; uniform random actions
lose 8/3 on average (``Var(a) + Var(2x)``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class TargetEnv(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
        self.x = np.zeros(1, np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1.0, 1.0, size=1).astype(np.float32)
        return self.x.copy(), {}

    def step(self, action):
        reward = -float((np.asarray(action, np.float64)[0] - 2.0 * self.x[0]) ** 2)
        return self.x.copy(), reward, True, False, {}
