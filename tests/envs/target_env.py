"""A one-step continuous-control task with a known optimum, for SAC's training tests.

Each episode is one step: the observation is a target ``x`` in ``[-1, 1]``, the action space
``Box(-2, 2)``, the reward ``-(a - 2x)^2``. The best policy earns 0; uniform random actions
lose 8/3 on average (``Var(a) + Var(2x)``). With ``cycle`` the targets are not drawn but
run through ``cycle`` evenly spaced points in order, whatever the seed, so a run resumed
with fresh envs sees what the uninterrupted run saw (when its rollouts are whole cycles).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class TargetEnv(gym.Env):
    def __init__(self, cycle: int = 0) -> None:
        self.cycle, self.resets = cycle, 0
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
        self.x = np.zeros(1, np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.cycle:
            self.x = np.array([-1.0 + 2.0 * (self.resets % self.cycle) / max(1, self.cycle - 1)], np.float32)
        else:
            self.x = self.np_random.uniform(-1.0, 1.0, size=1).astype(np.float32)
        self.resets += 1
        return self.x.copy(), {}

    def step(self, action):
        reward = -float((np.asarray(action, np.float64)[0] - 2.0 * self.x[0]) ** 2)
        return self.x.copy(), reward, True, False, {}
