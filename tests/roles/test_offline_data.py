"""``replay_buffer.offline``: the learner loads a recorded dataset as transition rows, and
refuses one whose spaces differ from the env's, naming the file, the field and both spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kilorl.datasets import DatasetError
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
        ("obs", "action", "reward", "next_obs", "terminated"), 400)
    np.testing.assert_array_equal(rows.columns["obs"][1:200], rows.columns["next_obs"][:199])  # within an episode


def test_a_dataset_of_another_env_is_refused_naming_both_spaces(tmp_path):
    record(tmp_path / "c", episodes=1, seed=1, env_id="CartPole-v1", policy="random")
    env = gym.make("Pendulum-v1")
    with pytest.raises(DatasetError, match=r"offline.path=.*observation_space Box.*differs from env Pendulum-v1's Box"):
        offline_rows(_cfg(tmp_path / "c"), env.observation_space, env.action_space)
    with pytest.raises(DatasetError, match="no such file"):
        offline_rows(_cfg(tmp_path / "missing"), env.observation_space, env.action_space)
