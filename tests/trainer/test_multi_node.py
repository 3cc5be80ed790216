"""Two raylets: one store worker per node, actors read their own node's worker, learners meet across nodes,
a replay table sharded over both nodes' workers is sampled from both."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def two_raylets() -> dict:
    """One run of ``multi_node_check`` (a fresh process) for the tests of this module that read it."""
    out = subprocess.run([sys.executable, "-m", "tests.trainer.multi_node_check"], capture_output=True, text=True,
                         timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_raylets_each_get_a_store_worker_and_roles_use_their_own_nodes(two_raylets):
    r = two_raylets
    assert sorted(r["workers"]) == sorted(r["nodes"]) and len(set(r["workers"].values())) == 2
    for node, address in r["actor_sources"]:  # each actor on its own node read from that node's worker
        assert address == r["workers"][node]
    assert {n for n, _ in r["actor_sources"]} == set(r["nodes"])
    assert r["actor_versions"] == [0, 0]  # node B's worker had version 0 (the writer fanned out to it)
    assert sorted(r["learner_nodes"]) == sorted(r["nodes"])  # one learner per node
    assert r["digests"][0] == r["digests"][1]  # they all-reduced: identical after a step on different data
    replay = r["replay"]  # one replay table sharded over both nodes' workers, sampled from both
    assert sorted(replay["shards"]) == sorted(r["workers"].values()) and replay["sampled_shards"] == [0, 1]
    assert replay["rows"] == 200 and replay["exact"]


def test_env_runners_insert_into_their_own_nodes_shard_and_the_learner_only_samples(two_raylets):
    """DQN on a table sharded over both nodes: each env runner's rows are in its own node's
    shard (the workers' own counts), the learner was handed counts only and inserted nothing,
    and it sampled from both shards."""
    r, a = two_raylets, two_raylets["actor_inserts"]
    rows_per_rollout = 16 * 4  # rollout_length x envs_per_actor
    assert [h["type"] for h in a["handed"]] == ["ReplayInsert"] * 4  # what reached the learner: no rows
    for h, node in zip(a["handed"], a["actor_nodes"] * 2):
        assert h["worker"] == r["workers"][node] and h["rows"] == rows_per_rollout
    for node in a["actor_nodes"]:  # each node's shard: exactly its own env runner's two rollouts
        (table,) = a["tables"][node]
        assert table["inserted_rows"] == 2 * rows_per_rollout and table["sampled_rows"] > 0, table
    last = a["stats"][-1]
    assert last["replay_learner_inserted_rows"] == 0 and last["replay_actor_inserted_rows"] == 4 * rows_per_rollout
    assert last["replay_inserted_rows"] == 4 * rows_per_rollout and last["gradient_steps"] > 0


@pytest.mark.slow
def test_the_mesh_heads_store_worker_killed_mid_run_comes_back_and_every_nodes_actors_keep_getting_versions():
    out = subprocess.run([sys.executable, "-m", "tests.trainer.head_recovery_check"], capture_output=True, text=True,
                         timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["restarts"] == [1, 0] and r["head_pid_changed"]  # the head's worker died once and came back
    assert [row["steps"] for row in r["rows"]] == [256] * 10  # the run went on, every batch full
    for row in r["rows"]:  # both actors (one per node) collected every batch with the newest version
        assert row["versions"] == [row["iteration"] - 1] * 2, row
    assert r["members"] == [sorted(r["workers"])] * 2  # the joiner re-joined the restarted head's ring
    assert set(r["latest"].values()) == {10}  # the last version reached both nodes' workers
    # and each actor reads from its own node's worker again (the client came back from its failover)
    assert [address for _, address in r["actor_sources"]] == r["workers"]
