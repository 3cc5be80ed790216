"""Metric reports: one JSON line each, and the same scalars in TensorBoard's event file."""

from __future__ import annotations

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kilorl.trainer.metrics import MetricsWriter


def test_every_numeric_field_of_a_report_is_a_tensorboard_scalar_at_its_env_step(tmp_path):
    writer = MetricsWriter(tmp_path, total_env_steps=1000, tensorboard=True, progress=False)
    writer.report({"env_steps": 100, "sps": 2500.0, "episode_return_mean": 21.5, "iteration": 1, "note": "x"})
    writer.report({"env_steps": 200, "sps": 3000.0, "episode_return_mean": float("nan"), "iteration": 2})
    writer.close()

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["episode_return_mean"] is None  # NaN is written as null, never as invalid JSON
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"sps", "episode_return_mean", "iteration"}
    assert [(e.step, e.value) for e in events.Scalars("sps")] == [(100, 2500.0), (200, 3000.0)]
    assert [(e.step, e.value) for e in events.Scalars("episode_return_mean")] == [(100, 21.5)]  # NaN skipped
