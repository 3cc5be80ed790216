"""Several policies on a Ray cluster: each policy's learner group (its own process group) runs on
the nodes its ``resources.policies.<name>.nodes`` labels name, as Ray's own actor table reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_two_raylets_each_policys_learner_group_runs_on_its_labelled_node_and_trains():
    out = subprocess.run([sys.executable, "-m", "tests.trainer.policy_placement_check"], capture_output=True,
                         text=True, timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    zones = {role: {r["zone_of"][n] for n in nodes} for role, nodes in r["planned"].items()}
    assert zones == {"learner/first": {"b"}, "learner/rest": {"a"}}
    assert r["ran"] == r["planned"]["learner/first"] + r["planned"]["learner/rest"]  # Ray's actor table
    assert r["steps"] == [32, 64]
    first, rest = r["digests"][:2], r["digests"][2:]
    assert first[0] == first[1] and rest[0] == rest[1] and first[0] != rest[0]  # ranks of a policy agree
    assert {"policy_loss/first", "policy_loss/rest"} <= set(r["stats"]), r["skips"]  # once missing at load 10: why
    assert r["parts"] == ["first", "rest"]
    assert "resources.policies.rest.nodes" in r["missing_error"] and "'zone=mars'" in r["missing_error"]
    assert "learner/rest" in r["missing_error"]
