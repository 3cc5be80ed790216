"""Run in a fresh process by test_role_placement: three raylets that declare no custom resource.

Each raylet is what ``ray start`` gives (CPUs, memory, Ray's own labels) plus one label of the
user's, ``zone=a|b|c``; none declares a ``kilorl_node_*`` resource. A run whose actors must be
on ``zone=c`` (``resources.actor.nodes``) trains to its step budget through the real
``OnPolicyLoop``, with two parameter-server shards that do not fit on one node. Prints one
JSON line: the plan (per role the node names and the Ray node id each has), where Ray's actor
table says every role process runs, the zone of each node, the env steps, which shards each
node's store worker holds, the per-shard metrics of the last row, and the start-up error of a
label no node has.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import ray
import yaml
from ray._private.state import actors as actor_table

from kilorl.trainer.cluster import Cluster
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.ray_start import start_local_cluster
from kilorl.trainer.role_placement import topology_node_ids
from kilorl.trainer.session import RoleSession, StartupError
from tests.conftest import tiny_config

ZONES = ("a", "b", "c")


def _running_on(handles: list) -> list[str]:
    """Ray node id of each role process, from Ray's actor table (not from the role itself)."""
    table = actor_table()
    return [table[h._actor_id.hex()]["Address"]["NodeID"] for h in handles]


def _shards_held(fleet) -> dict[str, list[str]]:
    """Ray node id -> the parameter shards whose bytes that node's store worker holds."""
    from kilorl.store import StoreClient

    out = {}
    for node, address in fleet.workers():
        with StoreClient(address, token=fleet.connector.token, zero_copy=False) as c:
            out[node] = sorted(n for n in c.version_list("policy/shard/"))
    return out


def _cli_plans(cfg, address: str) -> dict[str, dict[str, list[str]]]:
    """What ``kilorl plan --address`` and ``kilorl cluster describe --address`` print for ``cfg``."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(cfg.model_dump(mode="json"), f)
    out = {}
    for what, args in (("plan", ["plan", f.name, "--address", address, "--json"]),
                       ("describe", ["cluster", "describe", "--address", address, "--config", f.name, "--json"])):
        got = subprocess.run([sys.executable, "-m", "kilorl.cli.main", *args], capture_output=True, text=True,
                             timeout=300)
        assert got.returncode == 0, got.stderr[-2000:]
        data = json.loads(got.stdout)
        out[what] = data["plan"] if what == "plan" else data["roles"]
    return out


def main() -> None:
    cluster = start_local_cluster({"num_cpus": 0, "object_store_memory": 80 << 20},
                                  [{"num_cpus": 2, "memory": 2 << 30, "object_store_memory": 80 << 20,
                                    "labels": {"zone": zone}} for zone in ZONES])  # no resources={...}: plain
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        zone_of = {n["NodeID"]: (n.get("Labels") or {}).get("zone") for n in ray.nodes() if n["Alive"]}
        # one CPU per shard: the learner's node has room for one, so the plan puts the other elsewhere
        cfg = tiny_config(parallelism={"actor": 2, "learner": 1, "parameter_server": 2},
                          resources={"actor": {"cpus": 1, "memory_gb": 0.25, "nodes": ["zone=c"]},
                                     "parameter_server": {"cpus": 1, "memory_gb": 0.1}},
                          train={"total_env_steps": 1024})
        cli_plans = _cli_plans(cfg, cluster.address)  # before the run: both read the same Ray nodes
        with RoleSession(cfg, Cluster()) as roles:
            train_plan = roles.plan()  # what kilorl train prints
            from kilorl.trainer.role_placement import ray_topology

            ids = topology_node_ids(ray_topology())
            planned = {role: [ids[n] for n in roles.placement.planned_nodes(role)]
                       for role in ("learner", "actor", "parameter_server")}
            ran = {"learner": _running_on(roles.learners), "actor": _running_on(roles.actors)}
            results = list(OnPolicyLoop(cfg, roles, 0, 0))
            steps = [it.env_steps for it in results]
            shard_stats = {k: v for k, v in results[-1].stats.items() if k.startswith("ps_shard")}
            held = _shards_held(roles.fleet)
            store_workers_ran = dict(zip(roles.fleet.connector.nodes, _running_on(list(roles.fleet.connector.nodes.values()))))
        try:
            missing = tiny_config(resources={"learner": {"cpus": 1, "memory_gb": 0.25, "nodes": ["zone=mars"]}})
            with RoleSession(missing, Cluster()):
                missing_error = None
        except StartupError as err:
            missing_error = str(err)
        print(json.dumps({"planned": planned, "ran": ran, "zone_of": zone_of, "steps": steps,
                          "missing_error": missing_error, "held": held, "shard_stats": shard_stats,
                          "store_workers_ran": store_workers_ran, "train_plan": train_plan,
                          "cli_plans": cli_plans, "node_ids": ids}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
