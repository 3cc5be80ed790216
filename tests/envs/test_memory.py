"""Memory tasks: CartPole with the velocities hidden is CartPole, minus what a single
observation would tell about motion."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

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


def test_repeat_previous_easy_is_popgyms_task_with_a_one_hot_suit():
    """The observation is the dealt card's suit one-hot; answering the suit of the card four
    steps back scores +1 over the episode."""
    popgym = pytest.importorskip("popgym.envs")
    env = make_env("kilorl.envs.memory:RepeatPreviousEasy")
    twin = popgym.RepeatPreviousEasy()
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    obs, _ = env.reset(seed=5)
    suit = twin.reset(seed=5)[0]
    suits, total, done = [suit], 0.0, False
    np.testing.assert_array_equal(obs, np.eye(4, dtype=np.float32)[suit])
    while not done:
        answer = suits[-4] if len(suits) >= 4 else 0
        obs, reward, terminated, truncated, _ = env.step(answer)
        suit = twin.step(answer)[0]
        np.testing.assert_array_equal(obs, np.eye(4, dtype=np.float32)[suit])
        suits.append(suit)
        total += reward
        done = terminated or truncated
    assert total == pytest.approx(1.0)


def test_an_unknown_popgym_task_is_refused_naming_the_field():
    pytest.importorskip("popgym.envs")
    with pytest.raises(ValueError, match=r"env.kwargs.name: unknown POPGym task 'RepeatPreviousEasiest'.*RepeatPreviousEasy"):
        make_env("kilorl.envs.memory:popgym", {"name": "RepeatPreviousEasiest"})
