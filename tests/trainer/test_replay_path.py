"""The replay data path end to end: DQN trains through the generic trainer and roles, its
step accounting is exact, and a run checkpointed, resumed and finished ends where the
uninterrupted run ends."""

from __future__ import annotations

import numpy as np

from kilorl.roles.store_replay import table_prefix
from kilorl.trainer import Trainer
from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint
from kilorl.trainer.evaluate import evaluate
from kilorl.trainer.metrics import read_metrics
from tests.conftest import tiny_config

# rollouts of 7 steps = one cycle of the scripted env's two episodes (3 + 4 steps), so every
# rollout starts where a fresh env starts, as a resumed run's does
SCRIPTED = {"id": "tests.envs.scripted:ScriptedEnv", "kwargs": {"length": 3, "parity_only": True}}
DQN = {"name": "dqn", "rollout_length": 7, "learning_starts": 14, "train_freq": 14, "gradient_steps": 4,
       "batch_size": 8, "buffer_size": 100, "target_update_interval": 14, "lr": 1e-3,
       "exploration_initial_eps": 0.5, "exploration_final_eps": 0.5, "n_step": 2}


def _dqn(total: int, **sections):
    return tiny_config(env=SCRIPTED, algo=DQN, parallelism={"envs_per_actor": 2},
                       model={"hidden_sizes": [16], "activation": "relu"},
                       train={"total_env_steps": total, "pipeline_depth": 0, "seed": 5}, **sections)


def test_dqn_trains_through_the_generic_trainer_with_exact_step_accounting(ray_local, tmp_path):
    result = Trainer(_dqn(14 * 6), tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 84 and [r["env_steps"] for r in rows] == list(range(14, 85, 14))
    assert [r["gradient_steps"] for r in rows] == [0, 4, 4, 4, 4, 4]  # none until learning_starts is passed
    assert rows[-1]["replay_rows"] == 84
    state, meta = load_checkpoint(result.checkpoint)
    assert meta["updates"] == 20 and len(state["tensors"]["replay/obs"]) == 84
    played = evaluate(result.checkpoint, episodes=2)  # the greedy Q policy through the model's policy protocol
    assert played.returns == [6.0, 6.0]  # each fresh scripted env: a first episode of 3 steps, rewards 1 + 2 + 3


def test_a_dqn_run_resumed_from_its_checkpoint_ends_with_the_uninterrupted_runs_parameters(ray_local, tmp_path):
    whole = Trainer(_dqn(112), tmp_path / "whole").fit()
    Trainer(_dqn(56), tmp_path / "halves").fit()
    resumed = Trainer.resume(tmp_path / "halves", overrides=["train.total_env_steps=112"]).fit()
    assert whole.env_steps == resumed.env_steps == 112
    a, meta_a = load_checkpoint(latest_checkpoint(tmp_path / "whole"))
    b, meta_b = load_checkpoint(latest_checkpoint(tmp_path / "halves"))
    assert meta_a["updates"] == meta_b["updates"] > 0
    for part in ("model", "tensors"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            np.testing.assert_array_equal(a[part][k].numpy(), b[part][k].numpy(), err_msg=f"{part}/{k}")


def test_dqn_with_a_durable_replay_buffer_keeps_its_table_in_the_store_workers_and_a_resume_finds_it(ray_local,
                                                                                                      tmp_path):
    """The same run with ``replay_buffer``, in two halves: the table's rows are counted by the
    store worker that holds them, inserted there by the env runner (the learner was handed
    counts only), and kept out of the learner's checkpoints, which name the table instead. The
    resumed run finds the durable table again under the same name, the first half's rows in it."""
    section = {"sharding": True, "compression": "zstd", "durable": True}
    first = Trainer(_dqn(14 * 3, replay_buffer=section), tmp_path / "run").fit()
    result = Trainer.resume(tmp_path / "run", overrides=["train.total_env_steps=84"]).fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 84 and rows[-1]["env_steps"] == 84
    assert rows[-1]["replay_rows"] == 84 and rows[-1]["replay_inserted_rows"] == 84  # 42 of them the first half's
    assert rows[-1]["replay_actor_inserted_rows"] == 42 and rows[-1]["replay_learner_inserted_rows"] == 0
    assert rows[-1]["replay_shards"] == 1 and rows[-1]["replay_stored_bytes"] > 0
    state, meta = load_checkpoint(result.checkpoint)
    _, first_meta = load_checkpoint(first.checkpoint)
    assert meta["updates"] == 20 and not any(k.startswith("replay/") for k in state["tensors"])
    table = f"{table_prefix(tmp_path / 'run')}/learner0/dqn-0"  # named from the run directory
    assert meta["algorithm"]["replay_table"] == first_meta["algorithm"]["replay_table"] == table


def test_pong_dqn_example_shrunk_trains_with_single_frames_on_the_store_workers(ray_local, tmp_path):
    """examples/pong_dqn.yaml at test size: real Pong frames (84x84 grey stacks of 4) through the
    Nature CNN; the env runner inserts into its node's shard, which keeps each frame once,
    zstd-compressed, and the learner takes gradient steps on rebuilt stacks."""
    import yaml

    from kilorl.config import apply_overrides, config_from_dict
    from tests.conftest import REPO

    data = yaml.safe_load((REPO / "examples" / "pong_dqn.yaml").read_text())
    data.pop("evaluation")
    data = apply_overrides(data, [
        "train.total_env_steps=256", "algo.learning_starts=64", "algo.buffer_size=2000", "algo.batch_size=8",
        "algo.train_freq=32", "parallelism.actor=1", "parallelism.envs_per_actor=2", "train.pipeline_depth=0",
        "logging.progress=false", "logging.tensorboard=false", "logging.report_every_s=0",
        "resources.learner.memory_gb=0.25", "resources.actor.memory_gb=0.25"])
    result = Trainer(config_from_dict(data), tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    last = rows[-1]
    assert result.env_steps == 256 and sum(r.get("gradient_steps", 0) for r in rows) == (256 - 64) // 32
    assert last["replay_actor_inserted_rows"] == 256 and last["replay_learner_inserted_rows"] == 0
    # a row is 2 stacks of 4 frames (56 KiB raw); the table keeps about one frame per row, zstd'd
    assert last["replay_raw_bytes"] == 256 * (2 * 4 * 84 * 84 + 8 + 4 + 4)
    assert last["replay_compression_ratio"] > 40, last
