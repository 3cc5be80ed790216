"""Run in a fresh process by test_role_placement: three raylets that declare no custom resource.

Each raylet is what ``ray start`` gives (CPUs, memory, Ray's own labels) plus one label of the
user's, ``zone=a|b|c``; none declares a ``kilorl_node_*`` resource. A run whose actors must be
on ``zone=c`` (``resources.actor.nodes``) trains to its step budget through the real
``OnPolicyLoop``. Prints one JSON line: the plan (per role the node names and the Ray node id
each has), where Ray's actor table says every role process runs, the zone of each node, the
env steps, and the start-up error of a label no node has.
"""

from __future__ import annotations

import json

import ray
from ray._private.state import actors as actor_table
from ray.cluster_utils import Cluster as RayCluster

from kilorl.trainer.cluster import Cluster
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.role_placement import topology_node_ids
from kilorl.trainer.session import RoleSession, StartupError
from tests.conftest import tiny_config

ZONES = ("a", "b", "c")


def _running_on(handles: list) -> list[str]:
    """Ray node id of each role process, from Ray's actor table (not from the role itself)."""
    table = actor_table()
    return [table[h._actor_id.hex()]["Address"]["NodeID"] for h in handles]


def main() -> None:
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 << 20})
    try:
        for zone in ZONES:  # no resources={...}: plain raylets
            cluster.add_node(num_cpus=2, memory=2 << 30, object_store_memory=80 << 20, labels={"zone": zone})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        zone_of = {n["NodeID"]: (n.get("Labels") or {}).get("zone") for n in ray.nodes() if n["Alive"]}
        cfg = tiny_config(parallelism={"actor": 2, "learner": 1, "parameter_server": 1},
                          resources={"actor": {"cpus": 1, "memory_gb": 0.25, "nodes": ["zone=c"]}},
                          train={"total_env_steps": 1024})
        with RoleSession(cfg, Cluster()) as roles:
            from kilorl.trainer.role_placement import ray_topology

            ids = topology_node_ids(ray_topology())
            planned = {role: [ids[n] for n in roles.placement.planned_nodes(role)] for role in ("learner", "actor")}
            ran = {"learner": _running_on(roles.learners), "actor": _running_on(roles.actors)}
            steps = [it.env_steps for it in OnPolicyLoop(cfg, roles, 0, 0)]
        try:
            missing = tiny_config(resources={"learner": {"cpus": 1, "memory_gb": 0.25, "nodes": ["zone=mars"]}})
            with RoleSession(missing, Cluster()):
                missing_error = None
        except StartupError as err:
            missing_error = str(err)
        print(json.dumps({"planned": planned, "ran": ran, "zone_of": zone_of, "steps": steps,
                          "missing_error": missing_error}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
