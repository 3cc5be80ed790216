"""The ``queue`` data path end to end: IMPALA trains on rollouts as they complete, with the
batch's lag in every row, exact step accounting, and rollouts past ``max_policy_lag`` dropped."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError
from kilorl.trainer import Trainer
from kilorl.trainer.metrics import read_metrics
from tests.conftest import tiny_config


def _impala(queue: dict, total: int = 1024, name: str = "impala", **sections):
    return tiny_config(algo={"name": name, "rollout_length": 16, "queue": queue},
                       parallelism={"actor": 2, "envs_per_actor": 2}, train={"total_env_steps": total}, **sections)


@pytest.mark.parametrize("name", ["impala", "appo"])
def test_impala_and_appo_train_on_batches_of_the_first_rollouts_to_complete(ray_local, tmp_path, name):
    result = Trainer(_impala({"rollouts_per_batch": 2, "max_queued_rollouts": 4}, name=name), tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 1024 and [r["env_steps"] for r in rows] == list(range(64, 1025, 64))
    assert all(0 <= r["policy_lag_min"] <= r["policy_lag"] <= r["policy_lag_max"] for r in rows)
    assert all(r["batch_columns"] == 4 for r in rows)  # two runners' rollouts of 2 env columns each
    assert rows[-1]["lag_dropped"] == 0
    if name == "appo":  # the surrogate's ratio is against the behaviour policy: lagged, so not always 1
        assert all(0 <= r["clip_fraction"] <= 1 for r in rows) and any(r["approx_kl"] > 0 for r in rows)


def test_rollouts_behind_max_policy_lag_are_dropped_and_never_counted(ray_local, tmp_path):
    result = Trainer(_impala({"rollouts_per_batch": 1, "max_queued_rollouts": 2, "max_policy_lag": 0}, total=640),
                     tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert all(r["policy_lag_max"] == 0 for r in rows)  # every trained rollout was made by the newest version
    assert rows[-1]["lag_dropped"] > 0  # two runners race one learner: some rollouts fall behind
    assert result.env_steps == 32 * len(rows)


@pytest.mark.parametrize(("queue", "learners", "message"), [
    ({"rollouts_per_batch": 3}, 2, r"algo\.queue\.rollouts_per_batch=3 must be a multiple of parallelism\.learner=2"),
    ({"rollouts_per_batch": 4, "max_queued_rollouts": 2}, 1, r"algo\.queue\.max_queued_rollouts=2 is smaller than one batch"),
])
def test_queue_options_that_cannot_work_name_both_fields(queue, learners, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(algo={"name": "impala", "queue": queue}, parallelism={"actor": 2, "learner": learners})


def test_queue_options_on_an_on_policy_algorithm_name_the_field_and_the_algorithm():
    with pytest.raises(ConfigError, match=r"algo\.queue: an option of the queue data path \(appo, impala\); algo\.name=ppo"):
        tiny_config(algo={"name": "ppo", "queue": {"rollouts_per_batch": 2}})
