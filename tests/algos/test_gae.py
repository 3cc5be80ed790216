"""GAE against values worked out by hand."""

import numpy as np
import pytest

from kilorl.algos.gae import compute_gae


def test_gae_matches_hand_computation():
    gamma, lam = 0.9, 0.8
    rewards = np.array([[1.0], [0.0], [2.0]], np.float32)
    values = np.array([[0.5], [0.4], [0.3]], np.float32)
    terminated = np.array([[0], [1], [0]], bool)
    last = np.array([0.7], np.float32)
    # t=2: delta = 2 + 0.9*0.7 - 0.3 = 2.33; A2 = 2.33
    # t=1: done -> delta = 0 - 0.4 = -0.4; A1 = -0.4 (the recursion is cut)
    # t=0: delta = 1 + 0.9*0.4 - 0.5 = 0.86; A0 = 0.86 + 0.9*0.8*(-0.4) = 0.572
    adv, ret = compute_gae(rewards, values, terminated, np.zeros_like(terminated), last, gamma, lam)
    np.testing.assert_allclose(adv[:, 0], [0.572, -0.4, 2.33], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + values, rtol=1e-6)


def test_lambda_one_gives_discounted_returns():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 2)).astype(np.float32)
    values = rng.normal(size=(5, 2)).astype(np.float32)
    none = np.zeros((5, 2), bool)
    last = np.array([1.0, -1.0], np.float32)
    _, ret = compute_gae(rewards, values, none, none, last, 0.95, 1.0)
    expected = last.copy()
    for t in range(4, -1, -1):
        expected = rewards[t] + 0.95 * expected
        np.testing.assert_allclose(ret[t], expected, rtol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_envs_are_independent(lam):
    rewards = np.array([[1.0, 5.0], [1.0, 5.0]], np.float32)
    values = np.zeros((2, 2), np.float32)
    none = np.zeros((2, 2), bool)
    adv, _ = compute_gae(rewards, values, none, none, np.zeros(2, np.float32), 0.5, lam)
    np.testing.assert_allclose(adv[:, 1], 5 * adv[:, 0], rtol=1e-6)


def test_a_truncation_bootstraps_from_its_final_observation_and_a_termination_does_not():
    """Two envs, the same rewards and values; env 0's episode is cut by a time limit at t=1,
    env 1's terminates there. V(final obs) = 2.0 in both."""
    gamma, lam = 0.9, 0.8
    rewards = np.array([[1.0, 1.0], [0.5, 0.5], [2.0, 2.0]], np.float32)
    values = np.array([[0.5, 0.5], [0.4, 0.4], [0.3, 0.3]], np.float32)
    terminated = np.array([[0, 0], [0, 1], [0, 0]], bool)
    truncated = np.array([[0, 0], [1, 0], [0, 0]], bool)
    final_values = np.zeros((3, 2), np.float32)
    final_values[1] = 2.0
    last = np.array([0.7, 0.7], np.float32)
    adv, _ = compute_gae(rewards, values, terminated, truncated, last, gamma, lam, final_values)
    # t=2: 2 + 0.9*0.7 - 0.3 = 2.33 in both
    # t=1, truncated: 0.5 + 0.9*2.0 - 0.4 = 1.9 (the recursion is cut: the next row is a new episode)
    # t=1, terminated: 0.5 - 0.4 = 0.1
    # t=0: 1 + 0.9*0.4 - 0.5 = 0.86, + 0.72 * A1: 0.86 + 1.368 = 2.228 and 0.86 + 0.072 = 0.932
    np.testing.assert_allclose(adv[:, 0], [2.228, 1.9, 2.33], rtol=1e-6)
    np.testing.assert_allclose(adv[:, 1], [0.932, 0.1, 2.33], rtol=1e-6)


def test_without_final_values_a_truncation_ends_the_return_like_a_termination():
    rewards = np.array([[1.0], [0.5]], np.float32)
    values = np.array([[0.5], [0.4]], np.float32)
    truncated = np.array([[0], [1]], bool)
    a, _ = compute_gae(rewards, values, np.zeros_like(truncated), truncated, np.zeros(1, np.float32), 0.9, 0.8)
    b, _ = compute_gae(rewards, values, truncated, np.zeros_like(truncated), np.zeros(1, np.float32), 0.9, 0.8)
    np.testing.assert_array_equal(a, b)
