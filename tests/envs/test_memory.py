"""Memory tasks: CartPole with the velocities hidden is CartPole, minus what a single
observation would tell about motion."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from kilorl.envs import make_env


def test_cartpole_no_velocity_zeroes_the_velocities_and_keeps_cartpoles_dynamics():
    masked = make_env("kilorl.envs.memory:CartPoleNoVelocity", None, 500)
    full = gym.make("CartPole-v1")
    obs, _ = masked.reset(seed=3)
    ref, _ = full.reset(seed=3)
    assert masked.observation_space == full.observation_space
    moved = False
    for step in range(200):
        action = step % 3 == 0
        obs, reward, terminated, truncated, _ = masked.step(int(action))
        ref, ref_reward, ref_terminated, ref_truncated, _ = full.step(int(action))
        assert obs.dtype == np.float32 and obs[1] == 0.0 and obs[3] == 0.0
        np.testing.assert_array_equal(obs[[0, 2]], ref[[0, 2]])
        moved |= ref[1] != 0.0
        assert (reward, terminated, truncated) == (ref_reward, ref_terminated, ref_truncated)
        if terminated or truncated:
            break
    assert moved  # the hidden entries did carry information
