"""Faults mid-run: a killed actor is restarted and rejoins; its partial rollout is never counted."""

from __future__ import annotations

import pytest

from kilorl.trainer import Cluster
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.session import RoleSession
from tests.conftest import tiny_config


def test_an_actor_killed_mid_rollout_is_restarted_at_the_newest_version_and_steps_stay_exact(ray_local, tmp_path):
    import ray

    marker = tmp_path / "killed"
    # 10 batches of 2 actors x 4 envs x 32 steps; one env SIGKILLs its actor at its 100th step (batch 4)
    cfg = tiny_config(env={"id": "tests.trainer.broken_env:DiesOnce", "kwargs": {"marker": str(marker), "die_at": 100}},
                      parallelism={"actor": 2}, train={"total_env_steps": 2560})
    with RoleSession(cfg, Cluster()) as roles:
        loop = OnPolicyLoop(cfg, roles, 0, 0)
        pids = ray.get([a.pid.remote() for a in roles.actors])
        results = list(loop)
        after_pids = ray.get([a.pid.remote() for a in roles.actors])
    assert marker.exists() and sum(a != b for a, b in zip(pids, after_pids)) == 1  # one process died, restarted
    assert loop.lost_rollouts == 1 and results[-1].stats["lost_rollouts"] == 1
    steps = [sum(i["env_steps"] for i in it.infos) for it in results]
    assert steps == [256] * 10 and results[-1].env_steps == 2560  # every batch full, none counted twice
    after = [it for it in results if it.iteration > 4]  # the rollout that died belonged to batch 4
    assert all(i["version"] >= it.iteration - 1 for it in after for i in it.infos)  # rejoined on the newest


def test_a_killed_learner_makes_the_run_restore_its_last_checkpoint_and_finish(ray_local, tmp_path):
    import os
    import signal
    import threading
    import warnings

    from ray._private.state import actors

    from kilorl.trainer import Trainer
    from kilorl.trainer.checkpoint import latest_checkpoint
    from tests.store.store_helpers import wait_until

    cfg = tiny_config(train={"total_env_steps": 8192}, checkpoint={"every_env_steps": 1024})
    out: dict = {}

    def run() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out["result"] = Trainer(cfg, tmp_path / "run").fit()
        out["warnings"] = [str(w.message) for w in caught]

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: latest_checkpoint(tmp_path / "run"), timeout=300, what="a first checkpoint")
    (pid,) = [a["Pid"] for a in actors().values() if a["State"] == "ALIVE" and "LearnerProcess" in a["ActorClassName"]]
    os.kill(pid, signal.SIGKILL)
    t.join(600)
    assert any("learner 0 died" in w and "restoring" in w for w in out["warnings"]), out["warnings"]
    assert out["result"].env_steps == 8192
    import json

    steps = [json.loads(x)["env_steps"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x for x in steps if x <= 1024] == list(range(128, 1025, 128)), steps  # not replayed from zero


def test_a_killed_store_worker_is_restarted_and_the_run_goes_on_with_the_version_republished(ray_local):
    import os
    import signal

    cfg = tiny_config(parallelism={"actor": 2}, train={"total_env_steps": 2560})
    with RoleSession(cfg, Cluster()) as roles:
        loop = OnPolicyLoop(cfg, roles, 0, 0)
        (pid,) = roles.fleet.pids()
        results = []
        for it in loop:
            results.append(it)
            if it.iteration == 3:
                os.kill(pid, signal.SIGKILL)
        restarts, (new_pid,) = roles.fleet.restarts(), roles.fleet.pids()
        latest = roles.store.latest_version("policy")
    assert restarts == [1] and new_pid != pid  # the node's worker came back, on the same address
    assert [sum(i["env_steps"] for i in it.infos) for it in results] == [256] * 10
    # The restarted worker holds the newest version: the learner reconnected and published on
    # (actors that met it empty had the current version republished: stats["republished"]).
    assert latest == 10


def test_a_durable_version_comes_back_from_l2_after_a_store_worker_kill_without_a_republish(ray_local, tmp_path):
    import os
    import signal

    import numpy as np

    from tests.store.store_helpers import wait_until

    cfg = tiny_config(parallelism={"actor": 2}, train={"total_env_steps": 2560}, sync={"durable": True})
    with RoleSession(cfg, Cluster(), l2_dir=str(tmp_path / "l2")) as roles:
        loop = OnPolicyLoop(cfg, roles, 0, 0)
        (pid,) = roles.fleet.pids()
        results = []
        for it in loop:
            results.append(it)
            if it.iteration == 3:  # the learners are idle until the loop resumes: nobody can republish
                before = roles.store.fetch("policy")
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: roles.fleet.restarts() == [1], timeout=60, what="the worker's restart")
                client = wait_until(lambda: _connect(roles.fleet.connector), timeout=60,
                                    what="the restarted worker to serve")
                restored = roles.store.fetch("policy")
                recovered = client.stats()["cluster"]["counters"]["versions_recovered"]
                client.close()
        latest = roles.store.latest_version("policy")
    assert restored[0] == before[0] == 3  # the restarted worker (empty memory) serves version 3 ...
    for name, value in before[1].items():
        np.testing.assert_array_equal(restored[1][name].numpy(), value.numpy(), err_msg=name)
    assert recovered >= 2  # ... read back from its L2 directory (commit record and shard), not republished
    assert results[-1].stats["republished"] == 0 and loop.republished == 0
    assert [sum(i["env_steps"] for i in it.infos) for it in results] == [256] * 10 and latest == 10


def _connect(connector):
    """A client of the driver's node worker, or None while it does not serve yet."""
    try:
        return connector()
    except OSError:
        return None


@pytest.mark.slow
def test_a_resumed_durable_run_continues_from_the_last_published_version_not_the_older_checkpoint(ray_local, tmp_path):
    import json
    import shutil

    import numpy as np

    from kilorl.trainer import Trainer
    from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint

    cfg = tiny_config(train={"total_env_steps": 2048}, checkpoint={"every_env_steps": 1024, "keep": 3},
                      sync={"durable": True}, store={"keep_versions": 3})
    run = tmp_path / "run"
    b = cfg.rollout_steps  # 128 env steps per version
    Trainer(cfg, run).fit()  # versions 0..16 published durably; checkpoints at iterations 8 and 16
    last = latest_checkpoint(run)
    newest_state, newest_meta = load_checkpoint(last)
    shutil.rmtree(last)  # as if the run died after publishing version 16 but before checkpointing it
    state, meta = load_checkpoint(latest_checkpoint(run))
    assert (meta["iteration"], newest_meta["iteration"]) == (8, 16)

    with RoleSession(cfg, Cluster(), state, meta["iteration"], l2_dir=str(run.resolve() / "store-l2")) as roles:
        import ray

        digest = ray.get(roles.learners[0].weights_digest.remote())
        iteration, skipped = roles.iteration, roles.resumed_versions
    assert (iteration, skipped) == (16, 8)  # the store's newest durable version, not the checkpoint's
    assert digest == float(sum(np.asarray(v, np.float64).sum() for v in newest_state["model"].values()))

    result = Trainer.resume(run, overrides=[f"train.total_env_steps={2048 + 2 * b}"]).fit()
    steps = [json.loads(x)["env_steps"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-3:] == [2048, 2048 + b, 2048 + 2 * b]  # versions 17 and 18 follow 16: nothing replayed from 8
    assert result.env_steps == 2048 + 2 * b
