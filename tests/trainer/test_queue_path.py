"""The ``queue`` data path end to end: IMPALA trains on rollouts as they complete, with the
batch's lag in every row, exact step accounting, and rollouts past ``max_policy_lag`` dropped."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError
from kilorl.trainer import Trainer
from kilorl.trainer.metrics import read_metrics
from tests.conftest import tiny_config


def _impala(queue: dict, total: int = 1024, name: str = "impala", **sections):
    return tiny_config(algo={"name": name, "rollout_length": 16, "queue": queue},
                       parallelism={"actor": 2, "envs_per_actor": 2}, train={"total_env_steps": total}, **sections)


@pytest.mark.parametrize(("name", "refresh"), [("impala", None), ("appo", 1)])
def test_impala_and_appo_train_on_batches_of_the_first_rollouts_to_complete(ray_local, tmp_path, name, refresh):
    """(APPO's runners take newer versions between steps, ``refresh_every_steps``: the same rows, lag per step.)"""
    queue = {"rollouts_per_batch": 2, "max_queued_rollouts": 4, "refresh_every_steps": refresh}
    result = Trainer(_impala(queue, name=name), tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert result.env_steps == 1024 and [r["env_steps"] for r in rows] == list(range(64, 1025, 64))
    assert all(0 <= r["policy_lag_min"] <= r["policy_lag"] <= r["policy_lag_max"] for r in rows)
    for r in rows:  # per env runner: its rollouts trained so far, its batch lag within the batch's range
        per_actor = [r[k] for k in r if k.startswith("policy_lag_actor")]
        assert per_actor and all(r["policy_lag_min"] <= v <= r["policy_lag_max"] for v in per_actor)
        assert r["rollouts_actor0"] + r["rollouts_actor1"] == r["env_steps"] // 32
    assert all(r["batch_columns"] == 4 for r in rows)  # two runners' rollouts of 2 env columns each
    assert rows[-1]["lag_dropped"] == 0
    if name == "appo":  # the surrogate's ratio is against the behaviour policy: lagged, so not always 1
        assert all(0 <= r["clip_fraction"] <= 1 for r in rows) and any(r["approx_kl"] > 0 for r in rows)


def test_rollouts_behind_max_policy_lag_are_dropped_and_never_counted(ray_local, tmp_path):
    result = Trainer(_impala({"rollouts_per_batch": 1, "max_queued_rollouts": 2, "max_policy_lag": 0}, total=640),
                     tmp_path / "run").fit()
    rows = read_metrics(tmp_path / "run")
    assert all(r["policy_lag_max"] == 0 for r in rows)  # every trained rollout was made by the newest version
    assert rows[-1]["lag_dropped"] > 0  # two runners race one learner: some rollouts fall behind
    # dropped rollouts give their steps back: the run still trains on its whole budget, each step counted once
    assert result.env_steps == 640 == 32 * len(rows)


@pytest.mark.parametrize(("queue", "learners", "message"), [
    ({"rollouts_per_batch": 3}, 2, r"algo\.queue\.rollouts_per_batch=3 must be a multiple of parallelism\.learner=2"),
    ({"rollouts_per_batch": 4, "max_queued_rollouts": 2}, 1, r"algo\.queue\.max_queued_rollouts=2 is smaller than one batch"),
])
def test_queue_options_that_cannot_work_name_both_fields(queue, learners, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(algo={"name": "impala", "queue": queue}, parallelism={"actor": 2, "learner": learners})


def test_queue_options_on_an_on_policy_algorithm_name_the_field_and_the_algorithm():
    with pytest.raises(ConfigError, match=r"algo\.queue: an option of the queue data path \(appo, impala\); algo\.name=ppo"):
        tiny_config(algo={"name": "ppo", "queue": {"rollouts_per_batch": 2}})


def _queue_cfg(env: dict, queue: dict, total: int, actors: int):
    return tiny_config(env=env, algo={"name": "impala", "rollout_length": 16, "queue": queue},
                       parallelism={"actor": actors, "envs_per_actor": 2}, train={"total_env_steps": total})


def _run_loop(cfg):
    """The queue loop on its own roles: every iteration, the runners' pids before and after, the loop."""
    import ray

    from kilorl.trainer import Cluster
    from kilorl.trainer.queue_loop import QueueLoop
    from kilorl.trainer.session import RoleSession

    with RoleSession(cfg, Cluster()) as roles:
        loop = QueueLoop(cfg, roles, 0, 0)
        pids = ray.get([a.pid.remote() for a in roles.actors])
        results = list(loop)
        after = ray.get([a.pid.remote() for a in roles.actors])
    return results, pids, after, loop


def test_a_slowed_env_runner_delays_only_its_own_rollouts(ray_local, tmp_path):
    marker = tmp_path / "slow"
    # 3 runners x 2 envs x 16 steps; one runner's envs sleep 10 ms a step (>= 160 ms a rollout), the others' do not
    cfg = _queue_cfg({"id": "tests.trainer.broken_env:SlowInOneProcess", "kwargs": {"marker": str(marker), "step_s": 0.01}},
                     {"rollouts_per_batch": 2, "max_queued_rollouts": 4}, total=90 * 32, actors=3)
    results, pids, _, loop = _run_loop(cfg)
    slow = pids.index(int(marker.read_text()))
    trained = [0, 0, 0]
    for it in results:
        for info in it.infos:
            trained[info["actor"]] += 1
    assert results[-1].env_steps == 90 * 32 and sum(trained) == 90  # every rollout counted once
    assert [results[-1].stats[f"rollouts_actor{j}"] for j in range(3)] == trained
    # lock-step would give every runner the same count; here each fast runner makes >= 3x the slow one's rollouts
    fast = [n for j, n in enumerate(trained) if j != slow]
    assert min(fast) >= 3 * trained[slow], trained
    assert sum(len(it.infos) == 2 and all(i["actor"] != slow for i in it.infos) for it in results) >= len(results) // 2


def test_the_queue_bounds_the_rollouts_held_under_a_slow_learner_and_counts_the_pauses(ray_local):
    # every update sleeps 0.1 s: three runners of 32-step rollouts outpace the learner many times over
    cfg = _queue_cfg({"id": "tests.trainer.broken_env:SlowsItsLearner", "kwargs": {"update_s": 0.1}},
                     {"rollouts_per_batch": 1, "max_queued_rollouts": 2}, total=24 * 32, actors=3)
    results, _, _, loop = _run_loop(cfg)
    bound = cfg.algo.queue.max_queued_rollouts + cfg.parallelism.actor - 1  # queued, plus one per runner in flight
    queued = [it.stats["queued_rollouts"] for it in results]
    assert max(queued) >= cfg.algo.queue.max_queued_rollouts and max(queued) <= bound  # under pressure, and bounded
    assert results[-1].stats["queue_pauses"] > 0 and loop.pauses == results[-1].stats["queue_pauses"]
    assert results[-1].env_steps == 24 * 32 and len(results) == 24
    # paused runners do not run ahead: a batch's lag stays within what the queue holds, not what the runners
    # could make. The median batch, not every one: a runner descheduled mid-rollout on a busy machine sees
    # versions pass while the others go on (lag 6 against 5 once at load 10); what bounds every rollout's
    # lag is max_policy_lag (test_rollouts_behind_max_policy_lag_are_dropped_and_never_counted).
    lags = sorted(it.stats["policy_lag_max"] for it in results)
    assert lags[len(lags) // 2] <= bound + 1, lags


def test_an_env_runner_killed_mid_rollout_on_the_queue_path_loses_no_counted_rollout(ray_local, tmp_path):
    marker = tmp_path / "killed"
    cfg = _queue_cfg({"id": "tests.trainer.broken_env:DiesOnce", "kwargs": {"marker": str(marker), "die_at": 100}},
                     {"rollouts_per_batch": 2, "max_queued_rollouts": 4}, total=40 * 32, actors=2)
    results, pids, after, loop = _run_loop(cfg)
    assert marker.exists() and sum(a != b for a, b in zip(pids, after)) == 1  # one process died, restarted
    assert loop.lost_rollouts == 1 and results[-1].stats["lost_rollouts"] == 1
    assert [sum(i["env_steps"] for i in it.infos) for it in results] == [64] * 20  # every batch full
    assert results[-1].env_steps == 40 * 32 and sum(results[-1].stats[f"rollouts_actor{j}"] for j in range(2)) == 40
