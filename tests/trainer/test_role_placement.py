"""The trainer places its roles by the scheduler's plan, in Ray placement groups it removes again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kilorl.trainer import StartupError, Trainer
from kilorl.trainer.role_placement import local_needs, training_config
from tests.conftest import REPO, tiny_config
from tests.trainer.test_startup import BROKEN


def _live_groups(ray) -> list[str]:
    return [g["name"] for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]


def test_two_raylets_roles_run_on_the_planned_nodes_and_groups_are_removed():
    out = subprocess.run([sys.executable, "-m", "tests.trainer.placement_check"], capture_output=True, text=True,
                         timeout=480, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for role in ("learner", "actor"):
        assert [r["ids"][n] for n in r["planned"][role]] == r["ran"][role], role
    assert len(set(r["planned"]["learner"])) == 1  # one island: both learners on one node
    assert set(r["planned"]["learner"]) != set(r["planned"]["actor"])  # the actors on the other node
    assert r["groups_running"] == 3 and r["groups_after"] == 0  # learner, actor, parameter_server
    assert "actor" in r["broken_error"] and "refuses to reset" in r["broken_error"]
    assert r["groups_after_broken"] == 0
    assert "cannot place 'actor'" in r["unfit_error"] and "4 CPU" in r["unfit_error"]
    assert "resources.actor" in r["unfit_error"]
    assert r["groups_after_unfit"] == 0


def test_three_raylets_without_custom_resources_train_to_the_budget_with_every_role_where_the_plan_says():
    out = subprocess.run([sys.executable, "-m", "tests.trainer.plain_nodes_check"], capture_output=True, text=True,
                         timeout=540, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["steps"][-1] == 1024  # the step budget, on nodes started as plain `ray start` gives them
    assert r["ran"] == {k: r["planned"][k] for k in ("learner", "actor")}  # Ray's actor table: where the plan says
    # one topology: kilorl plan --address and cluster describe --address give the plan kilorl train printed,
    # and each role process runs on the node that printed plan names
    assert r["cli_plans"]["plan"] == r["train_plan"] and r["cli_plans"]["describe"] == r["train_plan"]
    assert {role: [r["node_ids"][n] for n in r["train_plan"][role]] for role in ("learner", "actor")} == r["ran"]
    shard_nodes, learner_node = r["planned"]["parameter_server"], r["planned"]["learner"][0]
    assert len(set(shard_nodes)) == 2  # one CPU each: the plan could not put both beside the learner
    for k, node in enumerate(shard_nodes):  # each shard's bytes on its planned node's worker
        assert f"policy/shard/{k}" in r["held"][node], (k, r["held"])
        assert r["store_workers_ran"][node] == node  # that worker's actor in the shard's bundle, on that node
    away = next(k for k, n in enumerate(shard_nodes) if n != learner_node)
    assert f"policy/shard/{away}" not in r["held"][learner_node]  # written to its home, not the learner's worker
    actor_node = r["planned"]["actor"][0]
    assert r["held"][actor_node] == ["policy/shard/0", "policy/shard/1"]  # the actors' worker pulled both
    assert r["shard_stats"]["ps_shard0_bytes"] > 0 and r["shard_stats"]["ps_shard1_bytes"] > 0
    assert r["shard_stats"]["ps_shard0_publish_s"] > 0 and r["shard_stats"]["ps_shard1_publish_s"] > 0
    assert {r["zone_of"][n] for n in r["planned"]["actor"]} == {"c"}  # resources.actor.nodes: [zone=c]
    assert "resources.learner.nodes" in r["missing_error"] and "'zone=mars'" in r["missing_error"]
    assert "learner" in r["missing_error"]


def test_failed_start_on_a_local_cluster_leaves_no_placement_group(ray_local, tmp_path):
    before = _live_groups(ray_local)
    cfg = tiny_config(env={"id": BROKEN}, parallelism={"actor": 2})
    with pytest.raises(StartupError, match="refuses to reset"):
        Trainer(cfg, tmp_path / "run").fit()
    assert _live_groups(ray_local) == before


def test_plan_that_does_not_fit_names_the_role_and_the_resource(ray_local, tmp_path):
    before = _live_groups(ray_local)
    cfg = tiny_config(resources={"learner": {"gpus": 2, "cpus": 1, "memory_gb": 0.1}}, train={"device": "cuda"})
    with pytest.raises(StartupError, match=r"cannot place 'learner'.*needs 2 GPU.*resources\.learner"):
        Trainer(cfg, tmp_path / "run").fit()
    assert _live_groups(ray_local) == before


def test_cpu_learner_reserves_no_gpu_and_an_embedded_ray_declares_what_the_plan_needs():
    cfg = tiny_config(resources={"learner": {"gpus": 1, "cpus": 2, "memory_gb": 16}}, parallelism={"actor": 3})
    assert training_config(cfg).resources.learner.gpus == 0
    assert training_config(cfg).resources.learner.cpus == 2
    cuda = tiny_config(resources={"learner": {"gpus": 1}}, train={"device": "cuda"})
    assert training_config(cuda).resources.learner.gpus == 1
    cpus, memory = local_needs(cfg)
    assert cpus == 2 + 3 * 1 + 1 * 0.1
    assert memory == pytest.approx((16 + 3 * 0.25 + 0.1) * 2**30)
