"""An environment whose every step is known in advance, for tests of the step record.

Observations are ``uint8`` ``[episode, step]``; episode ``e`` lasts ``length + e % 2`` steps
and ends terminated when ``e`` is even, truncated (a time limit) when odd; the reward of a
step is ``step + 1``. The action is ignored. With ``parity_only`` the first entry is the
episode's parity instead of its index, so every cycle of two episodes looks the same.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ScriptedEnv(gym.Env):
    def __init__(self, length: int = 3, parity_only: bool = False) -> None:
        self.length, self.parity_only = length, parity_only
        self.observation_space = gym.spaces.Box(0, 255, shape=(2,), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.step_in = -1, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.episode % (2 if self.parity_only else 256), self.step_in], np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episode += 1
        self.step_in = 0
        return self._obs(), {}

    def step(self, action):
        self.step_in += 1
        reward = float(self.step_in)
        end = self.step_in >= self.length + self.episode % 2
        terminated, truncated = end and self.episode % 2 == 0, end and self.episode % 2 == 1
        return self._obs(), reward, terminated, truncated, {}


def expected_steps(length: int, total: int) -> list[tuple[tuple[int, int], float, bool, bool, tuple[int, int]]]:
    """``(obs, reward, terminated, truncated, obs after)`` of the first ``total`` steps of one env."""
    out, episode, step = [], 0, 0
    while len(out) < total:
        obs = (episode, step)
        step += 1
        end = step >= length + episode % 2
        out.append((obs, float(step), end and episode % 2 == 0, end and episode % 2 == 1, (episode, step)))
        if end:
            episode, step = episode + 1, 0
    return out
