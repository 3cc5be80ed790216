"""``kilorl cluster describe`` prints the cluster and exits 2 on a bad backend."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES


def test_describe_a_described_cluster_with_a_config(kilorl_cli):
    res = kilorl_cli("cluster", "describe", "--nodes", "128", "--gpus-per-node", "8",
                     "--config", str(EXAMPLES / "plan_1024.yaml"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["kind"] == "described" and len(out["nodes"]) == 128
    assert {k: len(v) for k, v in out["roles"].items()} == {"learner": 32, "parameter_server": 16, "actor": 80}


def test_unavailable_backend_exits_2_listing_what_exists(kilorl_cli):
    res = kilorl_cli("cluster", "describe", "--nodes", "2", "--gpus-per-node", "8", "--backend", "mxlink")
    assert res.returncode == 2
    assert "mxlink" in res.stderr and "gloo" in res.stderr


def test_describe_this_machine(kilorl_cli):
    res = kilorl_cli("cluster", "describe")
    assert res.returncode == 0, res.stderr
    assert "(local), backend" in res.stdout and "nodes     1," in res.stdout
