"""compression_bench's bookkeeping: time to threshold and the side-by-side summary (no training runs)."""

from __future__ import annotations

from tests.benchmarks.bench_modules import load_bench

bench = load_bench("compression_bench")


def test_time_to_threshold_is_the_first_report_at_or_above_it():
    rows = [{"env_steps": 100, "train_time": 1.0}, {"env_steps": 200, "train_time": 2.0, "episode_return_mean": 480.0},
            {"env_steps": 300, "train_time": 3.0, "episode_return_mean": 500.0}]
    assert bench.time_to_threshold(rows, 475.0) == (2.0, 200)
    assert bench.time_to_threshold(rows, 600.0) == (None, None)


def _result(setting: str, sent: float, eval_mean: float) -> dict:
    return {"env": "cartpole", "setting": setting, "seed": 1, "bytes_sent_per_update": sent, "bytes_dense_per_update": 1000.0,
            "eval_mean": eval_mean, "time_to_threshold_s": 5.0, "steps_to_threshold": 5000}


def test_summary_marks_the_goal_only_with_70_percent_fewer_bytes_and_returns_within_5_percent():
    table = bench.summarise([_result("dense", 1000, 500.0), _result("topk_user", 250, 490.0),
                             _result("topk_sparse", 100, 400.0), _result("bf16", 500, 500.0)])
    lines = {line.split("|")[2].strip(): line for line in table.splitlines()[2:]}
    assert lines["topk_user"].rstrip(" |").endswith("yes")
    assert lines["topk_sparse"].rstrip(" |").endswith("no")  # returns 20% below dense
    assert lines["bf16"].rstrip(" |").endswith("no")  # only 50% fewer bytes
    assert "25.0%" in lines["topk_user"]
