"""Run in a fresh process by test_role_placement: roles on a 2-raylet cluster go where the plan says.

Each raylet declares its ``kilorl_node_<name>`` resource (``ray_node_resources``). Prints one
JSON line: per role the planned node and the node each instance really runs on, the error of a
start-up that fails in the env and of a plan that cannot fit, and the placement groups left.
"""

from __future__ import annotations

import json

import ray

from kilorl.placement.ray_placement import ray_node_ids
from kilorl.trainer.cluster import Cluster
from kilorl.trainer.session import RoleSession, StartupError
from tests.conftest import tiny_config
from tests.trainer.raylets import named_raylets
from tests.trainer.test_startup import BROKEN

NODES = ("a", "b")


def _live_groups() -> int:
    return sum(g["state"] != "REMOVED" for g in ray.util.placement_group_table().values())


def _startup_error(cfg) -> str | None:
    try:
        with RoleSession(cfg, Cluster()):
            return None
    except StartupError as err:
        return str(err)


def main() -> None:
    with named_raylets(NODES):
        # 2 learners (one island: one node) with their shard, 2 actors: 4.1 CPUs on two 3-CPU nodes
        cfg = tiny_config(parallelism={"actor": 2, "learner": 2, "parameter_server": 1})
        ids = ray_node_ids()
        with RoleSession(cfg, Cluster()) as roles:
            out = {
                "planned": {role: roles.placement.planned_nodes(role) for role in ("learner", "actor")},
                "ran": {"learner": ray.get([h.node_id.remote() for h in roles.learners]),
                        "actor": [src[0] for src in ray.get([h.parameter_source.remote() for h in roles.actors])]},
                "ids": ids,
                "groups_running": _live_groups(),
            }
        out["groups_after"] = _live_groups()
        out["broken_error"] = _startup_error(tiny_config(env={"id": BROKEN}, parallelism={"actor": 2}))
        out["groups_after_broken"] = _live_groups()
        out["unfit_error"] = _startup_error(tiny_config(resources={"actor": {"cpus": 4}}))
        out["groups_after_unfit"] = _live_groups()
        print(json.dumps(out))


if __name__ == "__main__":
    main()
