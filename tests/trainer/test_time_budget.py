"""``train.time_budget_s``: a run stops on its training clock and keeps the state it reached."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError
from kilorl.trainer import Trainer
from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint
from kilorl.trainer.metrics import read_metrics
from tests.conftest import tiny_config


def test_a_run_stops_at_the_first_iteration_past_its_time_budget_and_checkpoints_it(ray_local, tmp_path):
    budget = 3.0
    cfg = tiny_config(train={"total_env_steps": 10**9, "time_budget_s": budget})
    result = Trainer(cfg, tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert 0 < result.env_steps < 10**9
    last = rows[-1]
    assert last["env_steps"] == result.env_steps and last["train_time"] >= budget  # its final row is written
    # one iteration past the budget at most: the row before the last was still inside it
    assert all(r["train_time"] < budget for r in rows[:-1])
    _, meta = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert meta["env_steps"] == result.env_steps


@pytest.mark.parametrize("value", [0, -5])
def test_a_time_budget_that_is_not_positive_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match="train.time_budget_s"):
        tiny_config(train={"time_budget_s": value})
