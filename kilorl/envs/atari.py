"""Atari games with the usual DQN preprocessing (Mnih et al. 2015; SB3's ``AtariWrapper``), as
an ``env.id`` entry point: ``env: {id: "kilorl.envs.atari:make_atari", kwargs: {game: Pong}}``.

The wrappers, in order: up to 30 no-op actions at reset, FIRE at reset where the game needs it,
frame skip 4 with the max over the last two frames, 84x84 grey ``uint8`` frames (Gymnasium's
``AtariPreprocessing``), a life lost ends the episode for the learner while the game goes on
(episodic life: only game over resets the emulator), rewards clipped to their sign, and a
stack of the last ``frame_stack`` frames (the Q network sees motion). Observations stay
``uint8``; a replay table with ``replay_buffer.frame_stack`` keeps each frame once and
rebuilds the stacks when it samples. ``ale-py`` ships the ROMs (the ``atari`` extra).
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np


class EpisodicLife(gym.Wrapper):
    """A life lost is ``terminated`` for the learner; ``reset`` then only steps on (a no-op)
    unless the game is really over, so episodes of the emulator stay whole."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # a life was lost: carry on from where the game is
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE after a reset, for games that wait for it to start (Breakout, Pong)."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


class ClipReward(gym.RewardWrapper):
    """Rewards clipped to their sign (-1, 0, +1), so one learning rate fits every game."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


def make_atari(game: str = "Pong", frame_stack: int = 4, noop_max: int = 30, frame_skip: int = 4,
               screen_size: int = 84, episodic_life: bool = True, clip_rewards: bool = True,
               max_episode_frames: int = 108_000, **ale_kwargs: Any) -> gym.Env:
    """``ALE/<game>-v5`` without its own frame skip or sticky actions, wrapped for DQN;
    ``frame_stack`` 1 gives single ``[84, 84]`` frames, more ``[frame_stack, 84, 84]`` stacks."""
    try:
        import ale_py
    except ImportError as err:
        raise ImportError("env.id kilorl.envs.atari:make_atari needs ale-py (pip install 'kilorl[atari]')") from err
    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0,
                   max_num_frames_per_episode=max_episode_frames, **ale_kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
                                          terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    if episodic_life:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    if clip_rewards:
        env = ClipReward(env)
    if frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, frame_stack)
    return env
