"""A PettingZoo parallel environment whose every step is known in advance, for tests of agent
columns: agents that finish early and agents that appear mid-episode.

Episodes last ``length`` steps (5). ``a_0`` and ``a_1`` start; ``a_0`` terminates after step 2;
``late`` appears after step 3; ``a_1`` and ``late`` are truncated after the last step. An
agent's observation is ``[agent number, step]`` (float32); its reward per step is 1 for
``a_0``, 10 for ``a_1``, 100 for ``late``. Actions are ignored.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

NUMBER = {"a_0": 0, "a_1": 1, "late": 2}
REWARD = {"a_0": 1.0, "a_1": 10.0, "late": 100.0}
END_A0, APPEAR_LATE = 2, 3


class ScriptedAgents(ParallelEnv):
    metadata = {"name": "scripted_agents_v0", "render_modes": []}

    def __init__(self, length: int = 5, odd_space: bool = False) -> None:
        self.length, self.odd_space = length, odd_space
        self.possible_agents = ["a_0", "a_1", "late"]
        self.agents: list[str] = []
        self.step_in = 0

    @functools.cache  # noqa: B019 - PettingZoo's own pattern: one space object per agent
    def observation_space(self, agent: str) -> gym.Space:
        size = 3 if self.odd_space and agent == "late" else 2
        return gym.spaces.Box(0.0, 100.0, shape=(size,), dtype=np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        extra = [0.0] if self.odd_space and agent == "late" else []
        return np.array([NUMBER[agent], self.step_in, *extra], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = ["a_0", "a_1"]
        self.step_in = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.step_in += 1
        acting = list(self.agents)
        rewards = {a: REWARD[a] for a in acting}
        last = self.step_in >= self.length
        terminations = {a: a == "a_0" and self.step_in == END_A0 for a in acting}
        truncations = {a: last and not terminations[a] for a in acting}
        self.agents = [a for a in acting if not (terminations[a] or truncations[a])]
        if self.step_in == APPEAR_LATE and not last:
            self.agents.append("late")
            rewards["late"], terminations["late"], truncations["late"] = 0.0, False, False
        listed = acting + [a for a in self.agents if a not in acting]
        return ({a: self._obs(a) for a in listed}, rewards, terminations, truncations, {a: {} for a in listed})


def parallel_env(**kwargs: Any) -> ScriptedAgents:
    return ScriptedAgents(**kwargs)
