"""The seed sweep's bookkeeping (benchmarks/examples_over_seeds.py): layouts as the issue names
them, and the counts it reports against the thresholds."""

from __future__ import annotations

import pytest

from tests.benchmarks.bench_modules import load_bench

sweep = load_bench("examples_over_seeds")


def test_layouts_keep_the_examples_envs_per_rollout() -> None:
    assert sweep.Layout.parse("1x8", 8).overrides() == [
        "parallelism.actor=1", "parallelism.envs_per_actor=8", "parallelism.learner=1", "parallelism.parameter_server=1"]
    two = sweep.Layout.parse("2/2/2", 8)
    assert (two.actors, two.envs_per_actor, two.learners, two.shards) == (2, 4, 2, 2)
    assert two.name() == "2x4/2/2"


@pytest.mark.parametrize("text", ["2-2-2", "3/2/2", "x8"])
def test_a_layout_that_cannot_be_run_is_refused_naming_it(text: str) -> None:
    with pytest.raises(SystemExit, match="--layouts"):
        sweep.Layout.parse(text, 8)


def test_counts_are_per_layout_and_a_missing_evaluation_is_a_miss() -> None:
    Run = sweep.Run
    runs = [Run("1x8/1/1", 1, 0, final_eval=500.0, best_eval=500.0, first_hit_train_s=30.0),
            Run("1x8/1/1", 2, 0, final_eval=474.9, best_eval=475.0, first_hit_train_s=500.0),
            Run("2x4/2/2", 1, 1, final_eval=None, best_eval=None)]
    assert sweep.summary(runs, 475.0, 400.0) == [
        "1x8/1/1: final eval >= 475 on 1/2, best >= 475 on 2/2, an evaluation >= 475 within 400 s of training on 1/2",
        "2x4/2/2: final eval >= 475 on 0/1, best >= 475 on 0/1, an evaluation >= 475 within 400 s of training on 0/1"]


def test_a_sweep_split_over_invocations_is_reported_from_its_json_lines(tmp_path, capsys) -> None:
    import json
    from dataclasses import asdict

    lines = [sweep.Run("1x8/1/1", s, 0, env_steps=30720, final_eval=500.0, best_eval=500.0) for s in (2, 1)]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(asdict(r)) + "\n" for r in lines))
    assert sweep.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.index("| 1x8/1/1 | 1 |") < out.index("| 1x8/1/1 | 2 |")  # in seed order
    assert "1x8/1/1: final eval >= 475 on 2/2, best >= 475 on 2/2" in out
