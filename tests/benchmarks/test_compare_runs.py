"""compare_runs: two runs are "identical" only when every compared metric and tensor is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from tests.benchmarks.bench_modules import load_bench

cr = load_bench("compare_runs")


def _run(root: Path, loss: float, weight: float, wall: float) -> Path:
    ckpt = root / "checkpoints" / "step_000000001024"
    ckpt.mkdir(parents=True)
    rows = [{"iteration": i, "env_steps": 512 * i, "wall_time": wall * i, "episodes": 3 * i, "episode_return_mean": 20.0,
             "policy_loss": loss if i == 2 else 0.5} for i in (1, 2)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    save_file({"w": np.full((2, 2), weight, np.float32)}, str(ckpt / "model.safetensors"))
    return root


def test_runs_that_differ_only_in_timing_are_identical(tmp_path: Path) -> None:
    a, b = _run(tmp_path / "a", 0.25, 1.0, 1.0), _run(tmp_path / "b", 0.25, 1.0, 7.0)
    report = cr.compare(a, b)
    assert cr.identical(report) and report["metrics"]["first_difference"] is None
    assert cr.main([str(a), str(b)]) == 0


def _next_up(x: float) -> float:
    return float(np.nextafter(np.float32(x), np.float32(np.inf)))


def test_a_loss_or_weight_off_by_one_ulp_is_reported_where_it_happens(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", 0.25, 1.0, 1.0)
    b = _run(tmp_path / "b", _next_up(0.25), _next_up(1.0), 1.0)
    report = cr.compare(a, b)
    assert not cr.identical(report) and cr.main([str(a), str(b)]) == 1
    first = report["metrics"]["first_difference"]
    assert (first["iteration"], first["field"]) == (2, "policy_loss")
    assert report["metrics"]["first_episode_difference"] is None
    assert report["model.safetensors"]["tensors"]["w"]["max_abs"] > 0
