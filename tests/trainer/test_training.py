"""End to end: training on the real architecture learns, resumes, and evaluates."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from kilorl.trainer import Trainer
from kilorl.trainer.checkpoint import latest_checkpoint
from kilorl.trainer.evaluate import evaluate
from kilorl.trainer.metrics import read_metrics
from tests.conftest import EXAMPLES, tiny_config

RANDOM_CARTPOLE_RETURN = 22  # mean episode length of a uniform-random policy


def test_short_cartpole_run_learns(ray_local, tmp_path):
    cfg = tiny_config(
        algo={"rollout_length": 64, "num_minibatches": 2, "update_epochs": 10, "lr": 1e-3, "gamma": 0.98, "gae_lambda": 0.8},
        parallelism={"actor": 1, "envs_per_actor": 8},
        train={"total_env_steps": 40_000, "seed": 1},
    )
    result = Trainer(cfg, tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert rows[-1]["env_steps"] == result.env_steps >= 40_000
    for row in rows:
        assert {"env_steps", "wall_time", "sps"} <= set(row)
    assert result.episode_return_mean > 5 * RANDOM_CARTPOLE_RETURN
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_resume_continues_from_the_saved_step(ray_local, tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(train={"total_env_steps": 1024, "seed": 5}, logging={"tensorboard": True, "progress": False})
    Trainer(cfg, run).fit()
    saved = json.loads((latest_checkpoint(run) / "meta.json").read_text())
    assert saved["env_steps"] == 1024
    n_before = len(read_metrics(run))
    result = Trainer.resume(run, overrides=["train.total_env_steps=2048"]).fit()
    rows = read_metrics(run)
    new_rows = rows[n_before:]
    assert new_rows[0]["env_steps"] == 1024 + cfg.rollout_steps  # first new report continues the count
    assert new_rows[0]["iteration"] == saved["iteration"] + 1
    assert new_rows[0]["wall_time"] >= saved["wall_time"]
    assert result.env_steps == 2048
    assert latest_checkpoint(run).name.endswith("2048")
    assert any((run / "tb").iterdir())


def test_many_roles_pipelined_bf16_accumulated(ray_local, tmp_path):
    """Every knob at once: 2 learners (gloo), 2 actors, 2 PS shards, depth 1, bf16, accumulation."""
    cfg = tiny_config(
        parallelism={"actor": 2, "envs_per_actor": 4, "learner": 2, "parameter_server": 2},
        train={"pipeline_depth": 1, "total_env_steps": 4096, "gradient_accumulation_steps": 2,
               "mixed_precision": "bf16", "seed": 2},
    )
    result = Trainer(cfg, tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 4096
    assert all(r["policy_lag"] <= 1 for r in rows)  # never more stale than the pipeline allows
    assert any(r["policy_lag"] > 0 for r in rows)  # and actors really ran ahead
    assert all(r["grad_norm"] == r["grad_norm"] for r in rows)  # finite (not NaN)


def test_eval_cli_prints_json(ray_local, tmp_path, kilorl_cli):
    run = tmp_path / "run"
    Trainer(tiny_config(train={"total_env_steps": 512}), run).fit()
    res = kilorl_cli("eval", str(run), "--episodes", "3", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["episodes"] == 3
    assert out["episode_return_mean"] == pytest.approx(evaluate(run, episodes=3).episode_return_mean)
    assert out["episode_return_std"] >= 0
    res = kilorl_cli("plot", str(run), "-o", str(tmp_path / "c.png"))
    assert res.returncode == 0 and (tmp_path / "c.png").stat().st_size > 1000
    assert kilorl_cli("eval", str(tmp_path / "nowhere"), "--json").returncode == 2


@pytest.mark.slow
def test_cartpole_example_reaches_475(ray_local, tmp_path):
    """The shipped example solves CartPole: its final and its best policy evaluate >= 475 over
    20 episodes it never saw (it stops on two evaluations in a row at 475, and keeps the best)."""
    from kilorl.config import load_config
    from kilorl.trainer.checkpoint import best_checkpoint

    cfg = load_config(EXAMPLES / "cartpole_ppo.yaml", ["logging.progress=false", "logging.tensorboard=false"])
    result = Trainer(cfg, tmp_path / "run").fit()
    assert evaluate(result.checkpoint, episodes=20).episode_return_mean >= 475
    assert evaluate(best_checkpoint(tmp_path / "run"), episodes=20).episode_return_mean >= 475


def test_continuous_actions_with_normalizers_merged_from_actors(ray_local, tmp_path):
    from kilorl.trainer.checkpoint import load_checkpoint

    cfg = tiny_config(
        env={"id": "Pendulum-v1", "normalize_obs": True, "normalize_reward": True},
        parallelism={"actor": 2, "envs_per_actor": 2},
        train={"total_env_steps": 1024},
    )
    result = Trainer(cfg, tmp_path / "run").fit()
    state, meta = load_checkpoint(result.checkpoint)
    # Every observation of both actors was folded into the learner's statistics.
    assert float(state["obs_rms"]["count"][0]) >= 1024
    # Pendulum's first two features are cos/sin of the angle: unit-variance-ish, bounded.
    assert np.all(np.abs(state["obs_rms"]["mean"][:2]) <= 1) and np.all(state["obs_rms"]["var"][:2] <= 1)
    assert float(state["ret_rms"]["count"][0]) >= 1024 and float(np.asarray(state["ret_rms"]["var"])) > 0
    assert meta["env_steps"] == 1024


def test_a2c_trains_on_the_same_trainer(ray_local, tmp_path):
    """The second algorithm runs through the unchanged trainer and roles, and learns."""
    from kilorl.config import load_config

    cfg = load_config(EXAMPLES / "cartpole_a2c.yaml", ["train.total_env_steps=60000", "logging.progress=false",
                                                       "logging.tensorboard=false", "logging.report_every_s=0"])
    result = Trainer(cfg, tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps >= 60_000 and rows[-1]["policy_lag"] == 0
    assert result.episode_return_mean > 4 * RANDOM_CARTPOLE_RETURN


@pytest.mark.slow
def test_a2c_example_reaches_475(ray_local, tmp_path):
    from kilorl.config import load_config

    cfg = load_config(EXAMPLES / "cartpole_a2c.yaml", ["logging.progress=false", "logging.tensorboard=false"])
    result = Trainer(cfg, tmp_path / "run").fit()
    assert evaluate(result.checkpoint, episodes=20).episode_return_mean >= 475


def test_overlap_compute_comm_with_one_learner_warns_that_it_has_no_effect(ray_local, tmp_path):
    cfg = tiny_config(train={"total_env_steps": 256, "overlap_compute_comm": True})
    with pytest.warns(UserWarning, match="overlap_compute_comm=true has no effect with one learner"):
        Trainer(cfg, tmp_path / "run").fit()


def test_scaled_down_seed_config_trains_here(ray_local, tmp_path):
    """examples/plan_1024_small.yaml: 2 learners, 4 actors, accumulation 4, depth 8, bf16, overlap asked."""
    from kilorl.config import load_config

    cfg = load_config(EXAMPLES / "plan_1024_small.yaml", ["train.total_env_steps=4096", "logging.progress=false",
                                                          "logging.tensorboard=false", "logging.report_every_s=0"])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*overlap_compute_comm.*")  # 2 learners: overlap is real
        result = Trainer(cfg, tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 4096 and len(rows) == 4096 // cfg.rollout_steps
    # 2 learners all-reduced dense buckets: bytes sent are what a dense fp32 all-reduce sends
    assert all(np.isfinite(r["grad_norm"]) and r["comm_bytes_sent"] > 0 for r in rows)
    assert all(r["comm_bytes_sent"] == r["comm_bytes_dense"] and r["comm_ratio"] == 1.0 for r in rows)
