"""``replay_buffer.offline``: the learner loads a recorded dataset as transition rows, and
refuses one whose spaces differ from the env's, naming the file, the field and both spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kilorl.datasets import DatasetError, Episode, write_dataset
from kilorl.roles.offline_data import offline_rows
from kilorl.trainer.record import record
from tests.conftest import tiny_config


def _cfg(path, env_id: str = "Pendulum-v1"):
    return tiny_config(env={"id": env_id}, algo={"name": "sac"},
                       replay_buffer={"backend": "learner", "offline": {"path": str(path), "ratio": 0.25}})


def test_a_dataset_becomes_one_row_per_recorded_step(tmp_path):
    record(tmp_path / "p", episodes=2, seed=1, env_id="Pendulum-v1", policy="random")
    env = gym.make("Pendulum-v1")
    rows = offline_rows(_cfg(tmp_path / "p"), env.observation_space, env.action_space)
    assert rows.ratio == 0.25 and {k: len(v) for k, v in rows.columns.items()} == dict.fromkeys(
        ("obs", "action", "reward", "next_obs", "terminated", "return_to_go"), 400)
    np.testing.assert_array_equal(rows.columns["obs"][1:200], rows.columns["next_obs"][:199])  # within an episode


def test_a_dataset_of_another_env_is_refused_naming_both_spaces(tmp_path):
    record(tmp_path / "c", episodes=1, seed=1, env_id="CartPole-v1", policy="random")
    env = gym.make("Pendulum-v1")
    with pytest.raises(DatasetError, match=r"offline.path=.*observation_space Box.*differs from env Pendulum-v1's Box"):
        offline_rows(_cfg(tmp_path / "c"), env.observation_space, env.action_space)
    with pytest.raises(DatasetError, match="no such file"):
        offline_rows(_cfg(tmp_path / "missing"), env.observation_space, env.action_space)


def test_each_recorded_row_carries_its_return_to_go_within_its_episode(tmp_path):
    """Two hand-made episodes, algo.gamma 0.5: a terminated one with rewards 1, 2, 3 and a
    truncated one with rewards 4, 8, whose sum stops at its last recorded step (no bootstrap)."""
    obs = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def episode(rewards, terminated):
        T = len(rewards)
        return Episode(np.zeros((T + 1, 1), np.float32), np.zeros((T, 1), np.float32), np.array(rewards, np.float64),
                       np.array([False] * (T - 1) + [terminated]), np.array([False] * (T - 1) + [not terminated]))

    write_dataset(tmp_path / "h", [episode([1.0, 2.0, 3.0], True), episode([4.0, 8.0], False)], obs, act,
                  dataset_id="hand")
    cfg = tiny_config(env={"id": "Pendulum-v1"}, algo={"name": "sac", "gamma": 0.5},
                      replay_buffer={"backend": "learner", "offline": {"path": str(tmp_path / "h")}})
    rows = offline_rows(cfg, obs, act)
    np.testing.assert_allclose(rows.columns["return_to_go"], [2.75, 3.5, 3.0, 8.0, 8.0])
    np.testing.assert_array_equal(rows.columns["terminated"], [False, False, True, False, False])
