"""Two levels of control over one Gymnasium environment, as a PettingZoo parallel env of two
agents, ``high`` and ``low``, so that each level is a policy of ``multi_agent.policies``.

The high level picks an *option* (an integer below the env's ``num_options``) on a *decision
step*: the first step of an episode, and the step after an option ends. An option ends after
``every_k`` moves (None: only on the env's signal), or when the environment's
``option_signal(option)`` says so (a wall ahead, a landmark reached), or with the episode. A
decision step does not move the environment: the high agent's action becomes the option, the
low agent's action is ignored and both get reward 0. On every other step the low agent's
action moves the environment; the high agent's action is ignored.

Observations (both agents, one space): the env's observation, then the running option
one-hot (zeros for the high agent), then a decision flag (1 on a decision step). The high
level's reward per step is the env's; the low level's is the env's (times ``low_env_reward``,
1 by default) plus the option bonus that ``option_signal`` returns (reward for following the
option, documented by the env).

The env runner (``kilorl.roles.option_rollouts``) turns the high agent's column into one row
per option: the decision step's observation, action and extras, and the rewards summed over
the option's steps. Env steps count decision steps too (one per option, on top of the moves).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

HIGH, LOW = "high", "low"
"""The two agents; ``multi_agent.policy_mapping`` maps them to the levels' policies."""


def decision_flags(obs: np.ndarray) -> np.ndarray:
    """Which rows of option-level observations ``[..., D]`` are decision steps (the last entry)."""
    return np.asarray(obs)[..., -1] > 0.5


class OptionLevels(ParallelEnv):
    """``env`` driven by a high level that picks options and a low level that moves."""

    metadata = {"name": "option_levels_v0", "render_modes": []}

    def __init__(self, env: gym.Env, every_k: int | None = 8, low_env_reward: float = 1.0) -> None:
        """``low_env_reward``: the weight of the env's reward in the low level's (0: the low level
        earns only the option bonus, so it follows the options rather than the goal)."""
        base = env.unwrapped
        if not hasattr(base, "option_signal") or not hasattr(base, "num_options"):
            raise ValueError(f"env.kwargs.env: {type(base).__name__} offers no options (needs num_options and "
                             "option_signal(option) -> (bonus, over))")
        if every_k is not None and every_k < 1:
            raise ValueError(f"env.kwargs.every_k must be at least 1 (or null: until the option's end), got {every_k}")
        if not isinstance(env.observation_space, gym.spaces.Box) or not isinstance(env.action_space,
                                                                                   gym.spaces.Discrete):
            raise ValueError("env.kwargs.env: option levels need a Box observation and Discrete actions, the env has "
                             f"{env.observation_space} and {env.action_space}")
        self.env, self.every_k, self.low_env_reward = env, every_k, float(low_env_reward)
        self.num_options = int(base.num_options)
        if self.num_options != int(env.action_space.n):
            raise ValueError(f"env.kwargs.env: {self.num_options} options and {env.action_space.n} actions; the two "
                             "levels share one column space so far, so they must be as many")
        self.possible_agents = [HIGH, LOW]
        self.agents: list[str] = []
        self.option: int | None = None
        """The running option (None on a decision step)."""
        self.moves = 0
        """Moves made under the running option."""
        self._obs = np.zeros(0, np.float32)

    @functools.cache  # noqa: B019 - one space object per agent (PettingZoo's pattern)
    def observation_space(self, agent: str) -> gym.Space:
        size = int(np.prod(self.env.observation_space.shape)) + self.num_options + 1
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(self.num_options)

    def _observe(self) -> dict[str, np.ndarray]:
        flag = np.array([float(self.option is None)], np.float32)
        running = np.zeros(self.num_options, np.float32)
        if self.option is not None:
            running[self.option] = 1.0
        base = np.ravel(self._obs).astype(np.float32)
        return {HIGH: np.concatenate([base, np.zeros_like(running), flag]),
                LOW: np.concatenate([base, running, flag])}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._obs, _ = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        self.option, self.moves = None, 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.option is None:  # a decision step: the high level's action is the option
            self.option = int(actions[HIGH])
            return (self._observe(), {HIGH: 0.0, LOW: 0.0}, {HIGH: False, LOW: False},
                    {HIGH: False, LOW: False}, {HIGH: {}, LOW: {}})
        self._obs, reward, terminated, truncated, _ = self.env.step(actions[LOW])
        bonus, over = self.env.unwrapped.option_signal(self.option)
        self.moves += 1
        if over or (self.every_k is not None and self.moves >= self.every_k):
            self.option, self.moves = None, 0
        obs = self._observe()
        if terminated or truncated:
            self.agents = []
        both = (HIGH, LOW)
        rewards = {HIGH: float(reward), LOW: self.low_env_reward * float(reward) + bonus}
        return (obs, rewards, dict.fromkeys(both, bool(terminated)), dict.fromkeys(both, bool(truncated)),
                {a: {} for a in both})

    def close(self) -> None:
        self.env.close()


def option_levels(env: str, env_kwargs: dict[str, Any] | None = None, every_k: int | None = 8,
                  low_env_reward: float = 1.0) -> OptionLevels:
    """``env.id: kilorl.envs.option_levels:option_levels`` with ``env.kwargs: {env: <Gymnasium
    id or module:Class>, env_kwargs: {...}, every_k: 8, low_env_reward: 1.0}``."""
    from kilorl.envs.factory import make_env

    return OptionLevels(make_env(env, env_kwargs), every_k, low_env_reward)
