"""A multi-agent run's rows: ``episode_return_mean`` is the agents' summed return per episode,
``agent_return_mean/<agent>`` each agent's own rolling mean."""

from __future__ import annotations

import json
import time

import pytest

from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.metrics import MetricsWriter
from kilorl.trainer.reporting import Reporter
from tests.conftest import tiny_config


def info(episode_returns, agent_returns):
    return {"actor": 0, "version": 0, "env_steps": 100, "episode_returns": episode_returns,
            "episode_lengths": [25] * len(episode_returns), "collect_s": 0.1, "wait_s": 0.0,
            "agent_returns": agent_returns}


def test_rows_carry_each_agents_rolling_return_beside_the_summed_one(tmp_path):
    cfg = tiny_config(logging={"return_window": 2})
    writer = MetricsWriter(tmp_path, total_env_steps=1000, tensorboard=False, progress=False)
    reporter = Reporter(cfg, writer, {}, time.time(), {})
    reporter.observe(IterationResult(1, 100, [info([3.0], {"a": [1.0], "b": [2.0]})], {}, last=False))
    reporter.observe(IterationResult(2, 200, [info([5.0, 9.0], {"a": [2.0, 4.0], "b": [3.0, 5.0]})], {}, last=True))
    writer.close()
    row = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()][-1]
    assert row["episode_return_mean"] == pytest.approx(7.0)  # the window's last two episodes
    assert row["agent_return_mean/a"] == pytest.approx(3.0) and row["agent_return_mean/b"] == pytest.approx(4.0)
