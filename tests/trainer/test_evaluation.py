"""Evaluation during training: at its cadence, on the policy just published, and stopping on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kilorl.trainer import Trainer
from kilorl.trainer.checkpoint import best_checkpoint, latest_checkpoint, load_checkpoint, resolve_checkpoint
from kilorl.trainer.evaluate import evaluate
from kilorl.trainer.evaluation import EvaluationSchedule
from kilorl.trainer.metrics import read_metrics
from tests.conftest import tiny_config


def test_evaluations_are_reported_once_per_cadence_step(ray_local, tmp_path):
    cfg = tiny_config(train={"total_env_steps": 2048}, evaluation={"every_env_steps": 512, "episodes": 2})
    result = Trainer(cfg, tmp_path / "run").fit()
    rows = [r for r in read_metrics(tmp_path / "run") if "eval_return_mean" in r]
    assert [r["env_steps"] for r in rows] == [512, 1024, 1536, 2048]
    assert all(r["eval_return_min"] <= r["eval_return_mean"] and r["eval_return_min"] >= 1 for r in rows)
    # each evaluation's own time, within the training time of its row (benchmarks leave it out)
    assert all(0 < r["eval_s"] < r["train_time"] for r in rows)
    assert sum(r["eval_s"] for r in rows) < rows[-1]["train_time"]
    assert not any("eval_s" in r for r in read_metrics(tmp_path / "run") if "eval_return_mean" not in r)
    assert result.env_steps == 2048 and result.eval_return_mean == rows[-1]["eval_return_mean"]


def test_a_run_stopped_by_an_evaluation_keeps_the_policy_it_evaluated(ray_local, tmp_path):
    """Sampled actions from the evaluation's own seed: the same episodes replay only with the same weights."""
    cfg = tiny_config(train={"total_env_steps": 4096, "pipeline_depth": 1},
                      evaluation={"every_env_steps": 640, "episodes": 3, "deterministic": False, "stop_return": 0})
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.env_steps == 640  # the first evaluation (after 5 batches of 128) met stop_return
    _, meta = load_checkpoint(result.checkpoint)
    assert meta["env_steps"] == 640
    again = evaluate(result.checkpoint, episodes=3, deterministic=False, seed=cfg.evaluation.seed)
    assert again.episode_return_mean == result.eval_return_mean


def test_evaluating_leaves_the_training_exactly_as_it_was(ray_local, tmp_path):
    """Sampled evaluation episodes inside the learner draw from no stream the training uses."""
    runs = {}
    for name, evaluation in (("plain", {}), ("evaluated", {"every_env_steps": 256, "episodes": 2, "deterministic": False})):
        cfg = tiny_config(train={"total_env_steps": 1024}, evaluation=evaluation)
        state, _ = load_checkpoint(Trainer(cfg, tmp_path / name).fit().checkpoint)
        runs[name] = state["model"]
    assert runs["plain"].keys() == runs["evaluated"].keys()
    for k, v in runs["plain"].items():
        assert np.array_equal(v.numpy(), runs["evaluated"][k].numpy()), k


@pytest.mark.parametrize(("start", "first_due"), [(0, 512), (1000, 1024), (1024, 1536)])
def test_a_resumed_run_evaluates_at_the_next_multiple_of_the_cadence(start, first_due):
    from kilorl.config import EvaluationConfig

    schedule = EvaluationSchedule(EvaluationConfig(every_env_steps=512), start)
    assert not schedule.due(first_due - 1) and schedule.due(first_due)
    assert not EvaluationSchedule(EvaluationConfig(), start).due(10**9)


def test_a_run_that_needs_consecutive_evaluations_stops_on_the_last_of_them(ray_local, tmp_path):
    cfg = tiny_config(train={"total_env_steps": 4096, "pipeline_depth": 1},
                      evaluation={"every_env_steps": 640, "episodes": 2, "stop_return": 0, "stop_consecutive": 2})
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.env_steps == 1280
    assert [r["env_steps"] for r in read_metrics(tmp_path / "run") if "eval_return_mean" in r] == [640, 1280]


def test_keep_best_keeps_the_best_evaluated_policy_as_the_runs_result(ray_local, tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(train={"total_env_steps": 2048, "pipeline_depth": 1},
                      evaluation={"every_env_steps": 256, "episodes": 3, "keep_best": True})
    result = Trainer(cfg, run).fit()
    rows = [r for r in read_metrics(run) if "eval_return_mean" in r]
    best = max(r["eval_return_mean"] for r in rows)
    best_step = max(r["env_steps"] for r in rows if r["eval_return_mean"] == best)  # ties: the later one
    _, meta = load_checkpoint(result.checkpoint)
    assert result.checkpoint == best_checkpoint(run) == resolve_checkpoint(run)
    assert (meta["env_steps"], meta["eval_return_mean"]) == (best_step, best) == (best_step, result.best_eval_return_mean)
    again = evaluate(result.checkpoint, episodes=3, deterministic=True, seed=cfg.evaluation.seed)
    assert again.episode_return_mean == best
    assert latest_checkpoint(run).name.endswith("2048")  # the rotation still ends at the run's last step


def test_resuming_a_keep_best_run_continues_from_its_newest_checkpoint(ray_local, tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(train={"total_env_steps": 1024, "pipeline_depth": 1},
                      evaluation={"every_env_steps": 256, "episodes": 2, "keep_best": True})
    Trainer(cfg, run).fit()
    n_before = len(read_metrics(run))
    best_before = json.loads((best_checkpoint(run) / "meta.json").read_text())["eval_return_mean"]
    result = Trainer.resume(run, overrides=["train.total_env_steps=2048"]).fit()
    new_rows = read_metrics(run)[n_before:]
    assert new_rows[0]["env_steps"] == 1024 + cfg.rollout_steps
    assert [r["env_steps"] for r in new_rows if "eval_return_mean" in r] == [1280, 1536, 1792, 2048]
    assert result.env_steps == 2048 and latest_checkpoint(run).name.endswith("2048")
    assert result.best_eval_return_mean >= best_before  # the resumed run measures against the best so far
    assert json.loads((best_checkpoint(run) / "meta.json").read_text())["eval_return_mean"] == result.best_eval_return_mean


def test_a_fresh_run_in_a_used_directory_drops_the_old_best(ray_local, tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(train={"total_env_steps": 512},
                        evaluation={"every_env_steps": 256, "episodes": 1, "keep_best": True}), run).fit()
    assert best_checkpoint(run) is not None
    result = Trainer(tiny_config(train={"total_env_steps": 512}), run).fit()
    assert best_checkpoint(run) is None and result.checkpoint == latest_checkpoint(run)


def test_kilorl_eval_picks_the_best_the_latest_or_a_step_checkpoint_of_a_run(ray_local, tmp_path, kilorl_cli):
    from kilorl.trainer.checkpoint import select_checkpoint

    run = tmp_path / "run"
    cfg = tiny_config(train={"total_env_steps": 1024}, checkpoint={"every_env_steps": 512},
                      evaluation={"every_env_steps": 256, "episodes": 2, "keep_best": True})
    Trainer(cfg, run).fit()
    picked = {which: evaluate(run, episodes=1, checkpoint=which) for which in ("best", "latest", "step_512")}
    assert picked["best"].checkpoint == str(best_checkpoint(run))
    assert picked["latest"].checkpoint == str(latest_checkpoint(run)) and picked["latest"].env_steps == 1024
    assert picked["step_512"].env_steps == 512
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at 7 env steps; its step checkpoints: step_512, step_1024"):
        select_checkpoint(run, "step_7")
    with pytest.raises(ValueError, match="expected best, latest or step_N"):
        select_checkpoint(run, "worst")
    res = kilorl_cli("eval", str(run), "--checkpoint", "step_512", "--episodes", "1", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["env_steps"] == 512
    bad = kilorl_cli("eval", str(run), "--checkpoint", "step_7")
    assert bad.returncode == 2 and "no checkpoint at 7 env steps" in bad.stderr
    from kilorl.trainer.plotting import evaluations, plot_runs

    assert [r["env_steps"] for r in evaluations(run)] == [256, 512, 768, 1024]  # kilorl plot's dashed line
    assert plot_runs([run], tmp_path / "c.png").stat().st_size > 1000


def test_a_hierarchy_is_judged_on_its_high_level_and_keeps_both_levels_as_evaluated(ray_local, tmp_path):
    """Several policies, a learner group each: every group hands over its policy and both levels
    play; the best checkpoint replays the evaluated episodes exactly (the low level's return,
    option bonus included, depends on both levels' weights)."""
    from tests.roles.test_option_rollouts import LEVELS, ROOMS

    run = tmp_path / "run"
    cfg = tiny_config(env=ROOMS, multi_agent=LEVELS, parallelism={"actor": 1, "envs_per_actor": 3},
                      algo={"rollout_length": 40, "num_minibatches": 1, "update_epochs": 1},
                      train={"total_env_steps": 720, "pipeline_depth": 1},
                      evaluation={"every_env_steps": 240, "episodes": 4, "deterministic": False, "keep_best": True,
                                  "policy": "top"})
    result = Trainer(cfg, run).fit()
    rows = [r for r in read_metrics(run) if "eval_return_mean" in r]
    assert [r["env_steps"] for r in rows] == [240, 480, 720]
    assert all(r["eval_return_mean"] == r["eval_return_mean/top"] and "eval_return_mean/bottom" in r for r in rows)
    best = max(r["eval_return_mean"] for r in rows)
    best_row = [r for r in rows if r["eval_return_mean"] == best][-1]  # ties: the later one
    _, meta = load_checkpoint(result.checkpoint)
    assert result.checkpoint == best_checkpoint(run) and meta["env_steps"] == best_row["env_steps"]
    again = evaluate(run, episodes=4, deterministic=False, seed=cfg.evaluation.seed)
    assert again.policy_return_means == {"top": best_row["eval_return_mean/top"],
                                         "bottom": best_row["eval_return_mean/bottom"]}
