"""SAC through the generic trainer and roles: it learns a one-step control task whose best
return is known, publishes env runners the policy alone, a run checkpointed, resumed and
finished ends where the uninterrupted run ends, and with no env runner at all
(``parallelism.actor: 0``) it learns the task from a recorded dataset alone."""

from __future__ import annotations

import json

import numpy as np

from kilorl.datasets import read_dataset
from kilorl.trainer import Trainer
from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint
from kilorl.trainer.evaluate import evaluate
from kilorl.trainer.metrics import read_metrics
from kilorl.trainer.record import record
from tests.conftest import tiny_config

TARGET = {"id": "tests.envs.target_env:TargetEnv"}
SAC = {"name": "sac", "rollout_length": 16, "learning_starts": 128, "batch_size": 64, "buffer_size": 5000}


def _sac(total: int, env: dict = TARGET, **algo):
    return tiny_config(env=env, algo={**SAC, **algo}, parallelism={"envs_per_actor": 4},
                       model={"hidden_sizes": [32, 32], "activation": "relu"},
                       train={"total_env_steps": total, "pipeline_depth": 0, "seed": 7})


def test_sac_learns_a_one_step_task_to_near_its_optimum(ray_local, tmp_path):
    """Random actions lose 8/3 per episode on average; the greedy policy after 1,536 env steps
    (1,408 gradient steps) must lose less than 0.3."""
    result = Trainer(_sac(1536), tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 1536 and [r["env_steps"] for r in rows] == list(range(64, 1537, 64))
    assert sum(r["gradient_steps"] for r in rows) == 1536 - 128
    state, meta = load_checkpoint(result.checkpoint)
    assert meta["updates"] == 1408 and len(state["tensors"]["replay/obs"]) == 1536
    assert not any(k.startswith(("critic", "log_std_", "q")) for k in state["model"])  # the policy alone
    played = evaluate(result.checkpoint, episodes=50)
    assert np.mean(played.returns) > -0.3, played.returns
    # the trained policy, noised, recorded as a dataset (kilorl record RUN_DIR --noise)
    episodes, meta = read_dataset(record(tmp_path / "ds", episodes=20, seed=0, run=tmp_path / "run", noise=0.5))
    assert meta["total_steps"] == 20 and all(e.observations.shape == (2, 1) for e in episodes)
    assert -8 / 3 < np.mean([e.rewards.sum() for e in episodes]) < np.mean(played.returns)


def test_a_sac_run_resumed_from_its_checkpoint_ends_with_the_uninterrupted_runs_parameters(ray_local, tmp_path):
    # every 16-step rollout is two whole cycles of the targets, so fresh envs after the resume
    # see what the uninterrupted run's envs saw
    env = {**TARGET, "kwargs": {"cycle": 8}}
    algo = {"learning_starts": 64, "batch_size": 16, "utd_ratio": 0.5, "policy_delay": 2}
    whole = Trainer(_sac(384, env, **algo), tmp_path / "whole").fit()
    Trainer(_sac(192, env, **algo), tmp_path / "halves").fit()
    resumed = Trainer.resume(tmp_path / "halves", overrides=["train.total_env_steps=384"]).fit()
    assert whole.env_steps == resumed.env_steps == 384
    a, meta_a = load_checkpoint(latest_checkpoint(tmp_path / "whole"))
    b, meta_b = load_checkpoint(latest_checkpoint(tmp_path / "halves"))
    assert meta_a["updates"] == meta_b["updates"] == 160
    for part in ("model", "tensors"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            np.testing.assert_array_equal(a[part][k].numpy(), b[part][k].numpy(), err_msg=f"{part}/{k}")


def test_with_no_actor_sac_learns_the_task_from_a_recorded_dataset_alone(ray_local, tmp_path, capsys):
    """200 one-step episodes of uniformly random actions (mean return -8/3) are the only data;
    no env runner is planned or started, every sampled row is recorded, the step clock runs
    as an online run's would (640 gradient steps), and the greedy policy lands near the
    optimum on the learner's own evaluation env."""
    data = record(tmp_path / "random", episodes=200, seed=0, env_id=TARGET["id"], policy="random")
    cfg = tiny_config(env=TARGET, algo=SAC, parallelism={"actor": 0, "envs_per_actor": 4},
                      model={"hidden_sizes": [32, 32], "activation": "relu"},
                      train={"total_env_steps": 740, "pipeline_depth": 0, "seed": 7},
                      evaluation={"every_env_steps": 384, "episodes": 20},
                      replay_buffer={"backend": "learner", "offline": {"path": str(data), "ratio": 1.0}})
    result = Trainer(cfg, tmp_path / "run").fit()
    plan = json.loads(next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("plan: "))[6:])
    assert set(plan) == {"learner", "parameter_server"}  # no actor planned, so none started
    rows = read_metrics(tmp_path / "run")
    # 740 is not a whole number of 64-step updates: the last one passes it, as a last rollout does
    assert result.env_steps == 768 and [r["env_steps"] for r in rows] == list(range(64, 769, 64))
    assert sum(r["gradient_steps"] for r in rows) == 768 - 128
    assert all(r["episodes"] == 0 and "collect_s" not in r for r in rows)  # nothing was collected
    trained = [r for r in rows if r["gradient_steps"]]
    assert all("offline_q_mean" in r and "online_q_mean" not in r for r in trained)  # every row recorded
    assert [r["env_steps"] for r in rows if "eval_return_mean" in r] == [384, 768]
    played = evaluate(result.checkpoint, episodes=50)
    assert np.mean(played.returns) > -0.3, played.returns
