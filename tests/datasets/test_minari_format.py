"""Datasets in Minari's format: what ``kilorl record`` writes reads back equal, with kiloRL's
own reader and with ``minari.load_dataset`` when minari is installed; bad files fail naming
the file and the episode."""

from __future__ import annotations

import gymnasium as gym
import h5py
import numpy as np
import pytest

from kilorl.datasets import DatasetError, Episode, read_dataset, write_dataset
from kilorl.datasets.minari_format import deserialize_space, serialize_space
from kilorl.trainer.record import named_policy, play, record


def test_a_recorded_random_policy_reads_back_equal_arrays(tmp_path):
    data = record(tmp_path / "pendulum-random-v0", episodes=3, seed=11, env_id="Pendulum-v1", policy="random")
    env = gym.make("Pendulum-v1")
    expected = play(env, named_policy("random", env, 11), 3, 11)  # the same seeds play the same episodes
    episodes, meta = read_dataset(data.parent)
    assert meta["total_episodes"] == 3 and meta["total_steps"] == 600 and meta["dataset_id"] == "pendulum-random-v0"
    assert meta["observation_space"] == env.observation_space and meta["action_space"] == env.action_space
    for got, want in zip(episodes, expected, strict=True):
        assert got.observations.shape == (201, 3) and got.actions.shape == (200, 1)
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
        assert got.truncations[-1] and not got.terminations.any()
    with h5py.File(data / "main_data.hdf5") as f:  # Minari's layout: one group per episode
        assert sorted(f) == ["episode_0", "episode_1", "episode_2"] and "infos" in f["episode_0"]
        assert f["episode_2"].attrs["seed"] == 13 and f["episode_2"].attrs["total_steps"] == 200


def test_minari_loads_kilorls_dataset(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari")
    record(tmp_path / "cartpole-random-v0", episodes=2, seed=3, env_id="CartPole-v1", policy="random")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    dataset = minari.load_dataset("cartpole-random-v0")
    ours, _ = read_dataset(tmp_path / "cartpole-random-v0")
    assert dataset.total_episodes == 2
    for theirs, mine in zip(dataset.iterate_episodes(), ours, strict=True):
        np.testing.assert_array_equal(theirs.observations, mine.observations)
        np.testing.assert_array_equal(theirs.actions, mine.actions)
        np.testing.assert_array_equal(theirs.rewards, mine.rewards)


def test_spaces_round_trip_through_minaris_serialisation():
    for space in (gym.spaces.Box(-1.0, 2.0, (3, 2), np.float32), gym.spaces.Discrete(4, start=1)):
        assert deserialize_space(serialize_space(space)) == space


def _one_episode() -> Episode:
    return Episode(np.zeros((3, 2), np.float32), np.zeros((2, 1), np.float32), np.zeros(2), np.zeros(2, bool),
                   np.array([False, True]))


def test_a_missing_path_and_a_truncated_episode_fail_naming_the_file_and_the_episode(tmp_path):
    with pytest.raises(DatasetError, match="metadata.json: no such file"):
        read_dataset(tmp_path / "nowhere")
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    data = write_dataset(tmp_path / "d", [_one_episode(), _one_episode()], space, gym.spaces.Box(-1, 1, (1,), np.float32),
                         dataset_id="d")
    with h5py.File(data / "main_data.hdf5", "a") as f:
        del f["episode_1"]["rewards"]
    with pytest.raises(DatasetError, match=r"main_data.hdf5: episode_1 is truncated: no rewards"):
        read_dataset(tmp_path / "d")
    with pytest.raises(DatasetError, match="already exists"):  # nothing already stored is overwritten
        write_dataset(tmp_path / "d", [_one_episode()], space, space, dataset_id="d")


def test_corrupt_files_fail_naming_the_file_and_what_is_wrong(tmp_path):
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    data = write_dataset(tmp_path / "d", [_one_episode()], space, gym.spaces.Box(-1, 1, (1,), np.float32),
                         dataset_id="d")
    main, meta = data / "main_data.hdf5", data / "metadata.json"
    good = meta.read_text()
    main.write_bytes(main.read_bytes()[:100])  # cut short, as an interrupted copy leaves it
    with pytest.raises(DatasetError, match=r"main_data.hdf5: not a readable HDF5 file"):
        read_dataset(data)
    meta.write_text(good[: len(good) // 2])
    with pytest.raises(DatasetError, match=r"metadata.json: not valid JSON"):
        read_dataset(data)
    meta.write_text(good.replace('"action_space"', '"actions_space"'))
    with pytest.raises(DatasetError, match=r"metadata.json: no action_space"):
        read_dataset(data)
    meta.write_text(good.replace('\\"Box\\"', '\\"Tuple\\"', 1))
    with pytest.raises(DatasetError, match=r"metadata.json: observation_space: unsupported space type 'Tuple'"):
        read_dataset(data)


def test_the_record_command_writes_a_dataset_and_refuses_a_second_source(tmp_path, capsys):
    from kilorl.cli.main import main

    assert main(["record", "--env", "CartPole-v1", "--episodes", "2", "-o", str(tmp_path / "c"), "--seed", "5"]) == 0
    episodes, meta = read_dataset(tmp_path / "c")
    assert len(episodes) == 2 and meta["seed"] == 5 and episodes[1].seed == 6
    assert main(["record", "--episodes", "1", "-o", str(tmp_path / "x")]) == 2
    assert "RUN_DIR or --env" in capsys.readouterr().err


def test_a_dataset_recorded_on_a_perturbed_env_keeps_its_constructor_arguments(tmp_path, capsys):
    from kilorl.cli.main import main

    assert main(["record", "--env", "Pendulum-v1", "--episodes", "1", "-o", str(tmp_path / "g12"),
                 "--env-kwarg", "g=12.0"]) == 0
    assert read_dataset(tmp_path / "g12")[1]["env_kwargs"] == {"g": 12.0}
    assert main(["record", "--env", "Pendulum-v1", "--episodes", "1", "-o", str(tmp_path / "bad"),
                 "--env-kwarg", "g"]) == 2
    assert "--env-kwarg 'g': expected KEY=VALUE" in capsys.readouterr().err
