"""GAE against values worked out by hand."""

import numpy as np
import pytest

from kilorl.algos.gae import compute_gae


def test_gae_matches_hand_computation():
    gamma, lam = 0.9, 0.8
    rewards = np.array([[1.0], [0.0], [2.0]], np.float32)
    values = np.array([[0.5], [0.4], [0.3]], np.float32)
    dones = np.array([[0.0], [1.0], [0.0]], np.float32)
    last = np.array([0.7], np.float32)
    # t=2: delta = 2 + 0.9*0.7 - 0.3 = 2.33; A2 = 2.33
    # t=1: done -> delta = 0 - 0.4 = -0.4; A1 = -0.4 (the recursion is cut)
    # t=0: delta = 1 + 0.9*0.4 - 0.5 = 0.86; A0 = 0.86 + 0.9*0.8*(-0.4) = 0.572
    adv, ret = compute_gae(rewards, values, dones, last, gamma, lam)
    np.testing.assert_allclose(adv[:, 0], [0.572, -0.4, 2.33], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + values, rtol=1e-6)


def test_lambda_one_gives_discounted_returns():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 2)).astype(np.float32)
    values = rng.normal(size=(5, 2)).astype(np.float32)
    dones = np.zeros((5, 2), np.float32)
    last = np.array([1.0, -1.0], np.float32)
    _, ret = compute_gae(rewards, values, dones, last, 0.95, 1.0)
    expected = last.copy()
    for t in range(4, -1, -1):
        expected = rewards[t] + 0.95 * expected
        np.testing.assert_allclose(ret[t], expected, rtol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_envs_are_independent(lam):
    rewards = np.array([[1.0, 5.0], [1.0, 5.0]], np.float32)
    values = np.zeros((2, 2), np.float32)
    dones = np.zeros((2, 2), np.float32)
    adv, _ = compute_gae(rewards, values, dones, np.zeros(2, np.float32), 0.5, lam)
    np.testing.assert_allclose(adv[:, 1], 5 * adv[:, 0], rtol=1e-6)
