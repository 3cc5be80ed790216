"""A row's ``policy_lag``: versions between the policy that acted and the one trained, per step
where runners took newer versions mid-rollout (``algo.queue.refresh_every_steps``)."""

from __future__ import annotations

import json
import time

import pytest

from kilorl.core import step_lags
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.metrics import MetricsWriter
from kilorl.trainer.reporting import Reporter
from tests.conftest import tiny_config


def info(version, step_versions=None):
    out = {"actor": 0, "version": version, "env_steps": 4, "episode_returns": [], "episode_lengths": [],
           "collect_s": 0.1, "wait_s": 0.0}
    if step_versions is not None:
        out["step_versions"] = step_versions
    return out


def test_a_refreshed_rollouts_lag_is_one_per_step_and_a_plain_ones_is_its_version():
    assert step_lags(info(3, [3, 3, 4, 5]), 5) == [2, 2, 1, 0]
    assert step_lags(info(3), 5) == [2]


def test_the_rows_policy_lag_is_the_mean_over_steps(tmp_path):
    writer = MetricsWriter(tmp_path, total_env_steps=8, tensorboard=False, progress=False)
    reporter = Reporter(tiny_config(), writer, {}, time.time(), {})
    # trained as version 5 (iteration 6): one rollout refreshed twice, one acted with version 4 throughout
    reporter.observe(IterationResult(6, 8, [info(3, [3, 3, 4, 5]), info(4, [4, 4, 4, 4])], {}, last=True))
    writer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["policy_lag"] == pytest.approx((2 + 2 + 1 + 0 + 1 + 1 + 1 + 1) / 8)
