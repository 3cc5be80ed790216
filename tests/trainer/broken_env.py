"""An environment that fails in ``reset``: start-up failure tests point ``env.id`` here."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ResetRaises(gym.Env):
    """CartPole-shaped spaces; ``reset`` raises (the learner's probe never resets, the actor does)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise RuntimeError("this env refuses to reset")

    def step(self, action):
        raise AssertionError("never reached")
