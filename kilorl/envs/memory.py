"""Memory tasks: environments a memoryless policy cannot solve from one observation.

``CartPoleNoVelocity`` is CartPole with the velocities hidden (SB3-contrib's and rl-zoo's
``CartPoleNoVel``): obs[1] (cart velocity) and obs[3] (pole angular velocity) are zeroed, so
the observation keeps CartPole's shape and bounds and a policy must infer the velocities from
the observations it remembers. Used as ``env.id: kilorl.envs.memory:CartPoleNoVelocity``.

``popgym`` builds a POPGym task (Morad et al., 2023; ``pip install popgym``) by its class name,
``env.id: kilorl.envs.memory:popgym`` with ``env.kwargs: {name: RepeatPreviousEasy}``, and
``RepeatPreviousEasy`` is that task's shortcut. A discrete observation (a card's suit) is
handed to the policy one-hot, as POPGym's own baselines encode it: the MLP torso takes a
float vector, and a suit index as one number would order the suits.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
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


class OneHotObservation(gym.ObservationWrapper):
    """A ``Discrete(n)`` observation as a float32 one-hot vector of ``n``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.observation_space, gym.spaces.Discrete):
            raise ValueError(f"OneHotObservation needs a Discrete observation space, not {env.observation_space}")
        self.n = int(env.observation_space.n)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        out = np.zeros(self.n, np.float32)
        out[int(observation)] = 1.0
        return out


def popgym(name: str, **kwargs: Any) -> gym.Env:
    """POPGym's task ``name`` (``popgym.envs.<module>.<name>``, e.g. ``RepeatPreviousEasy``), its
    discrete observation one-hot."""
    try:
        import popgym.envs as envs
    except ImportError as err:
        raise ImportError("env.kwargs.name: POPGym tasks need the popgym package (pip install popgym)") from err
    task = getattr(envs, name, None)
    if task is None:
        known = sorted(n for n in dir(envs) if n[:1].isupper())
        raise ValueError(f"env.kwargs.name: unknown POPGym task {name!r}; known: {', '.join(known)}")
    env = task(**kwargs)
    return OneHotObservation(env) if isinstance(env.observation_space, gym.spaces.Discrete) else env


def RepeatPreviousEasy() -> gym.Env:  # noqa: N802 (named as the task, like a class)
    """POPGym's RepeatPreviousEasy: name the suit of the card dealt 4 steps ago, 52 cards (51
    steps); +1/48 per right answer and -1/48 per wrong one, so a return lies in [-1, 1] and a
    policy without memory, right one time in four, scores about -0.5."""
    return popgym("RepeatPreviousEasy")
