"""Two raylets: one store worker per node, actors read their own node's worker, learners meet across nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_two_raylets_each_get_a_store_worker_and_roles_use_their_own_nodes():
    out = subprocess.run([sys.executable, "-m", "tests.trainer.multi_node_check"], capture_output=True, text=True,
                         timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(r["workers"]) == sorted(r["nodes"]) and len(set(r["workers"].values())) == 2
    for node, address in r["actor_sources"]:  # each actor on its own node read from that node's worker
        assert address == r["workers"][node]
    assert {n for n, _ in r["actor_sources"]} == set(r["nodes"])
    assert r["actor_versions"] == [0, 0]  # node B's worker had version 0 (the writer fanned out to it)
    assert sorted(r["learner_nodes"]) == sorted(r["nodes"])  # one learner per node
    assert r["digests"][0] == r["digests"][1]  # they all-reduced: identical after a step on different data
