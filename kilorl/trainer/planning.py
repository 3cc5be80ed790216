"""From a run config to the scheduler's gang requests, and a placement of them.

Kept on the RL side: the placement package knows no RL config (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import Any

from kilorl.config import Config

ROLES = ("learner", "parameter_server", "actor")


def requests_from_config(cfg: Config) -> list[Any]:
    """Gang requests of the three roles: learners in one island, servers near them, actors anywhere."""
    from kilorl.placement import Affinity, Demand, GangRequest

    par, res = cfg.parallelism, cfg.resources

    def demand(r: Any) -> Any:
        return Demand.of(r.gpus, r.cpus, r.memory_gb)

    return [
        GangRequest("learner", par.learner, demand(res.learner), (Affinity("same_island"),), collective=True),
        GangRequest("parameter_server", par.parameter_server, demand(res.parameter_server),
                    (Affinity("near_role", role="learner"),)),
        GangRequest("actor", par.actor, demand(res.actor)),
    ]


def plan(cfg: Config, topology: Any, policy: str = "binpack-topo", gradient_bytes: float = 400e6) -> Any:
    """Place the config's roles on ``topology``; raises ``PlacementError`` when they do not fit."""
    from kilorl.placement import CapacityState, place

    return place(CapacityState(topology), requests_from_config(cfg), policy, gradient_bytes=gradient_bytes)
