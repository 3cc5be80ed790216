"""``kilorl plan`` on the reference 16/32/80 layout."""

from __future__ import annotations

import json

from kilorl.cli.main import main


def test_plan_reference_layout(repo, capsys):
    cfg = str(repo / "examples/plan_1024.yaml")
    assert main(["plan", cfg, "--nodes", "128", "--gpus-per-node", "8", "--json", "--compare"]) == 0
    out = json.loads(capsys.readouterr().out)
    ours = out["binpack-topo"]
    assert ours["roles"]["learner"]["instances"] == 32 and len(ours["roles"]["learner"]["nodes"]) == 4
    assert len(ours["roles"]["learner"]["leaves"]) == 1
    assert ours["roles"]["actor"]["gpus"] == 40.0
    assert set(ours["roles"]["parameter_server"]["nodes"]) <= set(ours["roles"]["learner"]["nodes"])
    assert ours["allreduce"]["learner"]["seconds"] < out["spread"]["allreduce"]["learner"]["seconds"]
    assert any("more than one NVLink island" in line for line in ours["explain"])


def test_plan_text_and_cluster_file(repo, capsys):
    cfg = str(repo / "examples/plan_1024.yaml")
    assert main(["plan", cfg, "--cluster", str(repo / "examples/clusters/heterogeneous.yaml")]) == 0
    text = capsys.readouterr().out
    assert "learner" in text and "h100-" in text and "why" in text


def test_plan_errors(repo, tmp_path, capsys):
    cfg = str(repo / "examples/plan_1024.yaml")
    assert main(["plan", cfg, "--policy", "random"]) == 2
    assert "allowed" in capsys.readouterr().err
    assert main(["plan", cfg, "-o", "parallelism.learner=5000"]) == 1
    assert "cannot place 'learner'" in capsys.readouterr().err
    bad = tmp_path / "c.yaml"
    bad.write_text("node_types: {}\nnode_groups: [{type: x, count: 1}]\n")
    assert main(["plan", cfg, "--cluster", str(bad)]) == 2
    assert "node_groups[0].type" in capsys.readouterr().err
