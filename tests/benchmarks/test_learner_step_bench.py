"""learner_step_bench measures the tree it is pointed at, in a fresh process per measurement."""

from __future__ import annotations

from tests.benchmarks.bench_modules import load_bench

bench = load_bench("learner_step_bench")


def test_a_measurement_times_a_real_update_and_a_real_rollout():
    row = bench.measure(bench.REPO, bench.REPO / "examples" / "cartpole_ppo.yaml", calls=2)
    assert set(row) == {"update_ms", "collect_ms"}
    # 20 epochs of forward and backward over 512 samples, and 64 env steps, cannot take under 1 ms
    assert row["update_ms"] > 1.0 and row["collect_ms"] > 1.0


def test_a_baseline_tree_is_measured_alternately_and_reported_beside_this_one(capsys):
    assert bench.main(["--baseline", str(bench.REPO), "--pairs", "1", "--calls", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["this tree", "baseline"]
