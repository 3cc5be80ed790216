"""Run in a fresh process by test_policy_placement: two raylets labelled ``zone=a`` and ``zone=b``
and a run of two policies whose learner groups (two ranks each, a process group per policy)
must sit on one zone each (``resources.policies``).

The run trains two iterations through the real ``OnPolicyLoop`` (each rank takes its policy's
part of its actors' rollouts) and writes a checkpoint with a part per policy. Prints one JSON
line: each policy's planned nodes, the nodes Ray's actor table says its learner processes run
on, each node's zone, the env steps, the policies' statistics of the last row, every learner's
weights digest, the checkpoint's parts, and the start-up error of a policy label no node has.

``python -m tests.trainer.policy_placement_check levels``: the same with the two policies as the
levels of a hierarchy (``multi_agent.hierarchy``, ``first`` the high level, ``rest`` the low)
over the option levels of the rooms task.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import ray
from ray._private.state import actors as actor_table

from kilorl.trainer.checkpoint import write_checkpoint
from kilorl.trainer.cluster import Cluster
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.ray_start import start_local_cluster
from kilorl.trainer.role_placement import ray_topology, topology_node_ids
from kilorl.trainer.session import RoleSession, StartupError
from tests.conftest import tiny_config

SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}
SMALL = {"cpus": 1, "memory_gb": 0.25}
ROOMS = {"id": "kilorl.envs.option_levels:option_levels",
         "kwargs": {"env": "kilorl.envs.rooms:SparseRooms", "env_kwargs": {"rooms": 2, "max_steps": 30}, "every_k": 4}}
LEVELS = "levels" in sys.argv[1:]
"""The two policies are a hierarchy's levels (high ``first``, low ``rest``), not agents' policies."""


def two_policies(first_zone: str, rest_zone: str):
    mapping = {"high": "first", "low": "rest"} if LEVELS else {"agent_0": "first", "*": "rest"}
    levels = {"hierarchy": {"high": "first", "low": "rest"}} if LEVELS else {}
    return tiny_config(env=ROOMS if LEVELS else SPREAD,
                       multi_agent={"policies": {"first": {}, "rest": {}}, "policy_mapping": mapping, **levels},
                       algo={"rollout_length": 8, "num_minibatches": 1, "update_epochs": 1},
                       parallelism={"actor": 2, "envs_per_actor": 2, "learner": 2},
                       resources={"policies": {"first": {**SMALL, "nodes": [f"zone={first_zone}"]},
                                               "rest": {**SMALL, "nodes": [f"zone={rest_zone}"]}},
                                  "actor": {"cpus": 0.5, "memory_gb": 0.25},
                                  "parameter_server": {"cpus": 0.1, "memory_gb": 0.1}},
                       train={"total_env_steps": 64})


def main() -> None:
    cluster = start_local_cluster({"num_cpus": 0, "object_store_memory": 80 << 20},
                                  [{"num_cpus": 3, "memory": 2 << 30, "object_store_memory": 80 << 20,
                                    "labels": {"zone": zone}} for zone in ("a", "b")])
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        zone_of = {n["NodeID"]: (n.get("Labels") or {}).get("zone") for n in ray.nodes() if n["Alive"]}
        cfg = two_policies("b", "a")
        with RoleSession(cfg, Cluster()) as roles:
            ids = topology_node_ids(ray_topology())
            planned = {role: [ids[n] for n in roles.placement.planned_nodes(role)]
                       for role in ("learner/first", "learner/rest")}
            table = actor_table()
            ran = [table[h._actor_id.hex()]["Address"]["NodeID"] for h in roles.learners]
            results = list(OnPolicyLoop(cfg, roles, 0, 0))
            digests = ray.get([h.weights_digest.remote() for h in roles.learners])
            ckpt = write_checkpoint(Path(tempfile.mkdtemp()), roles.checkpoint_files(), {"env_steps": 64})
            parts = sorted(p.name for p in (ckpt / "policies").iterdir())
        try:
            with RoleSession(two_policies("a", "mars"), Cluster()):
                missing_error = None
        except StartupError as err:
            missing_error = str(err)
        print(json.dumps({"planned": planned, "ran": ran, "zone_of": zone_of, "parts": parts,
                          "steps": [it.env_steps for it in results], "stats": sorted(results[-1].stats), "digests": digests,
                          "skips": {k: v for k, v in results[-1].stats.items()
                                    if k.split("/")[0] in ("skipped_update", "stale_rollouts", "lost_rollouts", "republished")},
                          "missing_error": missing_error}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
