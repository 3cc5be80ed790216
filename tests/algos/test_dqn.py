"""DQN's parts: the epsilon schedules, the n-step adder, the replay table, the TD update."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.algos import keys
from kilorl.algos.common.replay_table import RingTable
from kilorl.algos.dqn.config import DQNConfig
from kilorl.algos.dqn.policy import ape_x_epsilon, linear_epsilon
from kilorl.algos.dqn.transitions import nstep_transitions
from kilorl.core import Rollout


def test_the_linear_schedule_falls_over_its_fraction_of_the_run_and_then_holds():
    cfg = DQNConfig(exploration_initial_eps=1.0, exploration_final_eps=0.04, exploration_fraction=0.16)
    total = 50_000  # falls over the first 8,000 steps
    assert linear_epsilon(cfg, 0, total) == 1.0
    assert linear_epsilon(cfg, 4_000, total) == pytest.approx(0.52)
    assert linear_epsilon(cfg, 8_000, total) == pytest.approx(0.04)
    assert linear_epsilon(cfg, 40_000, total) == pytest.approx(0.04)


def test_ape_x_gives_each_env_runner_its_own_epsilon():
    cfg = DQNConfig(exploration="ape_x")
    eps = [ape_x_epsilon(cfg, i, 8) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert ape_x_epsilon(cfg, 0, 1) == pytest.approx(0.4)


def test_a_runners_epsilon_is_random_until_learning_starts_then_its_schedule(tmp_path):
    import gymnasium as gym

    from kilorl.algos.api import EnvRunnerContext
    from kilorl.algos.dqn.policy import EpsilonGreedy

    space = gym.spaces.Box(-1, 1, (4,))
    cfg = DQNConfig(exploration="ape_x", learning_starts=100)
    policies = [EpsilonGreedy(cfg, EnvRunnerContext(i, 4, 2, space, gym.spaces.Discrete(2), i, 1000)) for i in range(4)]
    assert [p.epsilon(99) for p in policies] == [1.0] * 4
    assert [p.epsilon(100) for p in policies] == [pytest.approx(ape_x_epsilon(cfg, i, 4)) for i in range(4)]


def _rollout() -> Rollout:
    """One env, T=4: rewards 1, 2, 3, 4; the episode terminates at t=1 (final obs 10), s_T = 40."""
    obs = np.array([[[0.0]], [[1.0]], [[2.0]], [[3.0]]], np.float32)
    steps = {keys.OBS: obs, keys.ACTIONS: np.zeros((4, 1), np.int64),
             keys.REWARDS: np.array([[1.0], [2.0], [3.0], [4.0]], np.float32),
             keys.TERMINATED: np.array([[0], [1], [0], [0]], bool), keys.TRUNCATED: np.zeros((4, 1), bool)}
    final = {keys.FINAL_T: np.array([1]), keys.FINAL_ENV: np.array([0]), keys.OBS: np.array([[10.0]], np.float32)}
    return Rollout(steps, last={keys.OBS: np.array([[40.0]], np.float32)}, final=final)


def test_one_step_transitions_bootstrap_from_the_next_observation_and_stop_at_a_termination():
    tr = nstep_transitions(_rollout(), gamma=0.5, n_step=1)
    np.testing.assert_array_equal(tr["reward"], [1, 2, 3, 4])
    np.testing.assert_array_equal(tr["next_obs"][:, 0], [1, 10, 3, 40])
    np.testing.assert_array_equal(tr["discount"], [0.5, 0.0, 0.5, 0.5])


def test_n_step_returns_are_cut_at_episode_and_rollout_ends():
    tr = nstep_transitions(_rollout(), gamma=0.5, n_step=3)
    # t=0: 1 + 0.5*2, stops at the termination (t=1), next = final obs, discount 0
    # t=1: 2, terminated; t=2: 3 + 0.5*4 then the rollout ends: next = s_T, discount 0.5^2; t=3: 4, 0.5
    np.testing.assert_allclose(tr["reward"], [2.0, 2.0, 5.0, 4.0])
    np.testing.assert_array_equal(tr["next_obs"][:, 0], [10, 10, 40, 40])
    np.testing.assert_allclose(tr["discount"], [0.0, 0.0, 0.25, 0.5])


def test_a_truncation_keeps_its_discount_so_the_final_observation_bootstraps():
    rollout = _rollout()
    rollout.steps[keys.TRUNCATED], rollout.steps[keys.TERMINATED] = rollout.steps[keys.TERMINATED], np.zeros((4, 1), bool)
    tr = nstep_transitions(rollout, gamma=0.5, n_step=2)
    np.testing.assert_allclose(tr["reward"][:2], [2.0, 2.0])
    np.testing.assert_array_equal(tr["next_obs"][:2, 0], [10, 10])
    np.testing.assert_allclose(tr["discount"][:2], [0.25, 0.5])


def test_the_table_evicts_oldest_first_and_a_restored_copy_samples_the_same_rows():
    table = RingTable(5, {"x": ((), np.int64)}, seed=3)
    table.insert({"x": np.arange(4)})
    table.insert({"x": np.arange(4, 7)})  # 7 rows into 5: 0 and 1 are gone
    assert len(table) == 5 and sorted(table.columns["x"].tolist()) == [2, 3, 4, 5, 6]
    arrays, meta = table.state()
    copy = RingTable(5, {"x": ((), np.int64)}, seed=99)
    copy.load(arrays, meta)
    np.testing.assert_array_equal(table.sample(16)["x"], copy.sample(16)["x"])
    with pytest.raises(ValueError, match="columns"):
        table.insert({"y": np.arange(2)})


def test_a_dueling_head_splits_value_and_mean_free_advantages():
    import gymnasium as gym
    import torch

    from kilorl.algos.dqn.model import build_q_network
    from kilorl.config import ModelConfig

    net = build_q_network(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), ModelConfig(hidden_sizes=[8], dueling=True))
    obs = torch.randn(5, 4)
    h = net.torso(obs)
    q = net(obs)
    torch.testing.assert_close(q.mean(-1), net.value_head(h).squeeze(-1))  # advantages average to 0
    assert q.shape == (5, 3) and torch.equal(net.policy(obs), q.argmax(-1))
    with pytest.raises(ValueError, match="Discrete"):
        build_q_network(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), ModelConfig())


def test_a_nature_cnn_q_network_takes_uint8_frame_stacks_and_other_models_refuse_the_torso():
    import gymnasium as gym
    import torch

    from kilorl.algos.dqn.model import build_q_network
    from kilorl.config import ModelConfig
    from kilorl.models import build_actor_critic

    model_cfg = ModelConfig(torso="nature_cnn", hidden_sizes=[512], activation="relu")
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    q = build_q_network(obs_space, gym.spaces.Discrete(6), model_cfg)
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    assert q(frames).shape == (3, 6) and q.cnn.out_dim == 64 * 7 * 7  # Nature's 3136 features
    torch.testing.assert_close(q(frames), q(frames.float() / 255))  # bytes scaled to [0, 1] inside
    with pytest.raises(ValueError, match="model.torso: nature_cnn is for Q networks"):
        build_actor_critic(obs_space, gym.spaces.Discrete(6), model_cfg)
