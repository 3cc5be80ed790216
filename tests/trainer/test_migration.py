"""The driver moves a role predicted to run out of memory (kilorl.trainer.migration).

The end-to-end check runs on a 2-raylet ``ray.cluster_utils.Cluster`` in a fresh process
(tests/trainer/migration_check.py): an actor and a learner with an injected leak are moved
to the other node before their limit, and the run finishes with exact env-step accounting.
On one node there is nowhere to go: an actor, a learner or a store worker whose objects are
durable (``sync.durable``) restarts in place; the actor even while its rollout runs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from kilorl.trainer import Trainer
from kilorl.trainer.replacement import replacement_node
from tests.conftest import REPO
from tests.trainer.migration_config import BUDGET_BYTES, LEAK_BYTES_PER_S, migration_config, slow_env

IN_PLACE_BATCHES = 120
"""Batches of the one-node run: long enough for both decisions and both restarts (slow_env: >= 23 s)."""

A, B, HEAD = "a" * 12 + "0" * 20, "b" * 12 + "0" * 20, "c" * 12 + "0" * 20


def _node(node_id: str, named: bool = True, alive: bool = True) -> dict:
    return {"NodeID": node_id, "Alive": alive,
            "Resources": {"CPU": 3.0, **({f"kilorl_node_{node_id[0]}": 1000.0} if named else {})}}


def test_room_excludes_the_suspect_node_and_nodes_without_the_free_resources():
    nodes = [_node(A), _node(B)]
    free = {A: {"CPU": 2.0, "memory": 2e9}, B: {"CPU": 0.5, "memory": 2e9}}
    assert replacement_node(nodes, free, {"CPU": 1.0}, exclude=A[:12]) is None  # B has half a CPU
    assert replacement_node(nodes, free, {"CPU": 0.5}, exclude=A[:12]) == B
    assert replacement_node(nodes, free, {"CPU": 1.0}, exclude=B[:12]) == A
    assert replacement_node(nodes, free, {"CPU": 1.0, "memory": 3e9}, exclude=B[:12]) is None


def test_the_scheduler_packs_the_replacement_where_it_fits_best_and_skips_dead_and_unnamed_nodes():
    nodes = [_node(A), _node(B), _node(HEAD, named=False), _node("d" * 32, alive=False)]
    free = {A: {"CPU": 1.0}, B: {"CPU": 2.0}, HEAD: {"CPU": 8.0}, "d" * 32: {"CPU": 8.0}}
    assert replacement_node(nodes, free, {"CPU": 1.0}, exclude="x" * 12) == A  # binpack: the fuller node
    assert replacement_node(nodes, free, {"CPU": 1.5}, exclude="x" * 12) == B
    unnamed = [_node(A, named=False), _node(B, named=False)]  # no node is placement-managed: all count
    assert replacement_node(unnamed, free, {"CPU": 1.0}, exclude=A[:12]) == B


def test_a_replacement_needing_a_device_goes_where_a_free_share_of_one_is_big_enough():
    nodes = [_node(A), _node(B)]
    free = {A: {"CPU": 2.0, "GPU": 0.5}, B: {"CPU": 2.0, "GPU": 1.0}}
    assert replacement_node(nodes, free, {"CPU": 1.0, "GPU": 1.0}, exclude="x" * 12) == B
    assert replacement_node(nodes, free, {"CPU": 1.0, "GPU": 0.5}, exclude="x" * 12) == A  # fills A's half device
    assert replacement_node(nodes, free, {"CPU": 1.0, "GPU": 1.0}, exclude=B[:12]) is None


@pytest.mark.slow
def test_one_node_a_leaking_actor_and_learner_are_restarted_in_place_and_the_run_finishes_exactly(ray_local, tmp_path):
    leaks = [{"role": "actor", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S},
             {"role": "learner", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}]
    cfg = slow_env(migration_config(leaks, IN_PLACE_BATCHES * 256))
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.stopped is None
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert result.env_steps == cfg.train.total_env_steps == rows[-1]["iteration"] * cfg.rollout_steps  # exact accounting
    records = {r["role"]: r for r in map(json.loads, (tmp_path / "run/monitor/migrations.jsonl").read_text().splitlines())}
    assert sorted(records) == ["actor", "learner"]
    for rec in records.values():
        assert (rec["rank"], rec["outcome"]) == (0, "restarted_in_place") and rec["from_node"] == rec["to_node"]
        assert rec["level_bytes"] < rec["limit_bytes"] == BUDGET_BYTES  # replaced before the limit
        assert rec["detail"].startswith("no other node has") and "the old process ended first" in rec["detail"]
    assert "rollout(s) of it dropped and collected again" in records["actor"]["detail"]
    assert records["learner"]["detail"].split("; ")[1].startswith("resumed from step_")
    # the replacements do not leak (the injected leak stays with the old process): no second decision
    assert len(records) == 2
    moved_at = max(rec["iteration"] for rec in records.values())
    after = [x["episode_return_mean"] for x in rows if x["iteration"] > moved_at and "episode_return_mean" in x]
    assert len(after) >= 10 and all(math.isfinite(v) for v in after)


STORE_BATCHES = 60
"""Batches of the store worker's run: it leaks from its start, so its decision comes ~10 s in (>= 11 s of batches)."""
LONG_ROLLOUT_STEP_S = 0.11
"""SlowCartPole's step time for the mid-rollout test: one rollout (4 envs x 32 steps) takes >= 14 s,
longer than the detector's warm-up, half window and confirmations (~8 s) after the actor starts."""


@pytest.mark.slow
def test_one_node_a_leaking_actor_is_restarted_in_place_during_its_first_rollout_not_after_the_iteration(
        ray_local, tmp_path):
    cfg = slow_env(migration_config([{"role": "actor", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}], 128, actors=1),
                   step_s=LONG_ROLLOUT_STEP_S)
    assert cfg.rollout_steps == 128  # the whole run is one rollout: a decision between iterations would come too late
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.stopped is None and result.env_steps == 128
    [rec] = [json.loads(x) for x in (tmp_path / "run/monitor/migrations.jsonl").read_text().splitlines()]
    assert (rec["role"], rec["rank"], rec["outcome"]) == ("actor", 0, "restarted_in_place")
    assert (rec["iteration"], rec["env_steps"]) == (0, 0)  # decided while the data path waited for the rollout
    assert "1 unfinished rollout(s) of it dropped" in rec["detail"]
    assert rec["level_bytes"] < rec["limit_bytes"] == BUDGET_BYTES
    [row] = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert (row["iteration"], row["env_steps"], row["lost_rollouts"]) == (1, 128, 1)  # collected again, counted once

def two_raylet_run(*args: str) -> dict:
    """``tests.trainer.migration_check ARGS`` in a fresh process (its own two-raylet cluster); the run
    must finish its budget unstopped with exact env-step accounting. Returns its JSON line."""
    out = subprocess.run([sys.executable, "-m", "tests.trainer.migration_check", *args], capture_output=True,
                         text=True, timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["stopped"] is None
    assert r["env_steps"] == r["total_env_steps"] == r["rows"][-1]["iteration"] * r["batch"]  # exact accounting
    return r



@pytest.mark.slow
def test_two_raylets_a_leaking_actor_and_learner_move_to_the_other_node_and_the_run_finishes_exactly():
    r = two_raylet_run()
    done = {rec["role"]: rec for rec in r["records"] if rec["outcome"] == "completed"}
    assert sorted(done) == ["actor", "learner"] and len(r["records"]) == 2
    for rec in done.values():
        assert rec["rank"] == 0 and rec["from_node"] != rec["to_node"] and rec["to_node"] in r["nodes"]
        assert rec["level_bytes"] < rec["limit_bytes"]  # moved before the limit
        assert rec["serving_s"] < 30.0
    assert done["learner"]["detail"].startswith("resumed from step_")
    # the return curve: episodes keep finishing after the moves, and the learner did not restart from
    # scratch (a fresh policy would drop the recent mean to CartPole's random level, ~20)
    moved_at = max(rec["iteration"] for rec in done.values())
    before = [x["episode_return_mean"] for x in r["rows"] if x["iteration"] <= moved_at and "episode_return_mean" in x]
    after = [x["episode_return_mean"] for x in r["rows"] if x["iteration"] > moved_at and "episode_return_mean" in x]
    assert before and len(after) >= 10 and all(math.isfinite(v) for v in after)
    assert min(after[:10]) >= 0.5 * before[-1]
    assert after[-1] > r["rows"][0]["episode_return_mean"]


@pytest.mark.slow
def test_two_raylets_roles_whose_limit_is_nearer_than_a_replacements_start_end_first_and_move():
    r = two_raylet_run("--end-first")
    done = {rec["role"]: rec for rec in r["records"] if rec["outcome"] == "completed"}
    assert sorted(done) == ["actor", "learner"] and len(r["records"]) == 2
    for rec in done.values():
        assert rec["from_node"] != rec["to_node"] and rec["to_node"] in r["nodes"]
        assert rec["level_bytes"] < rec["limit_bytes"]
        # the old process ended before its replacement served (not after, as when it serves on)
        assert rec["old_ended_s"] is not None and rec["old_ended_s"] < rec["serving_s"]
        assert "nearer than a replacement's start" in rec["detail"]
    assert "unfinished rollout(s) of it dropped" in done["actor"]["detail"]
    assert done["learner"]["detail"].startswith("resumed from step_") and "ended first" in done["learner"]["detail"]


@pytest.mark.slow
def test_one_node_a_leaking_durable_store_worker_restarts_in_place_from_l2_and_the_run_finishes_exactly(
        ray_local, tmp_path):
    # without sync.durable the same leak stops the run (no_room): tests/trainer/test_early_stop.py
    cfg = slow_env(migration_config([{"role": "store", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}],
                                    STORE_BATCHES * 256))
    cfg = cfg.model_copy(update={"sync": cfg.sync.model_copy(update={"durable": True})})
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.stopped is None
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert result.env_steps == cfg.train.total_env_steps == rows[-1]["iteration"] * cfg.rollout_steps  # exact accounting
    [rec] = [json.loads(x) for x in (tmp_path / "run/monitor/migrations.jsonl").read_text().splitlines()]
    assert (rec["role"], rec["rank"], rec["outcome"]) == ("store", 0, "restarted_in_place"), rec
    assert rec["from_node"] == rec["to_node"] and rec["level_bytes"] < rec["limit_bytes"] == BUDGET_BYTES
    assert "recovered the durable ones from L2" in rec["detail"] and "reads whole" in rec["detail"]
    # training went on after the restart: versions kept being published and episodes kept finishing
    after = [x for x in rows if x["iteration"] > rec["iteration"]]
    assert len(after) >= 10 and all(math.isfinite(x["episode_return_mean"]) for x in after if "episode_return_mean" in x)


@pytest.mark.slow
def test_two_raylets_a_leaking_store_worker_hands_off_its_objects_and_leaves_and_the_run_finishes_exactly():
    r = two_raylet_run("--store")
    [rec] = r["records"]
    assert (rec["role"], rec["rank"], rec["outcome"]) == ("store", 1, "completed"), rec
    assert rec["from_node"] != rec["to_node"] and rec["to_node"] in r["nodes"]
    assert rec["level_bytes"] < rec["limit_bytes"] and rec["serving_s"] < 30.0
    assert "reads whole without it" in rec["detail"]
    # training went on through the hand-off: versions kept being published and episodes kept finishing
    after = [x for x in r["rows"] if x["iteration"] > rec["iteration"]]
    assert len(after) >= 10 and all(math.isfinite(x["episode_return_mean"]) for x in after if "episode_return_mean" in x)


@pytest.mark.slow
def test_two_raylets_one_of_two_learners_leaks_so_the_group_restarts_from_the_checkpoint_with_it_elsewhere():
    r = two_raylet_run("--learners", "2")
    [rec] = r["records"]
    assert (rec["role"], rec["rank"], rec["outcome"]) == ("learner", 0, "completed"), rec
    assert rec["from_node"] != rec["to_node"] and rec["to_node"] in r["nodes"]
    assert rec["level_bytes"] < rec["limit_bytes"] and rec["serving_s"] < 30.0
    assert "all 2 learners restarted" in rec["detail"]
    # the restarted group trains on from the checkpoint: no fall back to CartPole's random level (~20)
    before = [x["episode_return_mean"] for x in r["rows"] if x["iteration"] <= rec["iteration"] and "episode_return_mean" in x]
    after = [x["episode_return_mean"] for x in r["rows"] if x["iteration"] > rec["iteration"] and "episode_return_mean" in x]
    assert before and len(after) >= 10 and min(after[:10]) >= 0.5 * before[-1]
