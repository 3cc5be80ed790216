"""From a run config to the scheduler's gang requests, and a placement of them.

Kept on the RL side: the placement package knows no RL config (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import Any

from kilorl.config import Config
from kilorl.config_policies import learner_resources, learner_roles

ROLES = ("learner", "parameter_server", "actor")


def requests_from_config(cfg: Config, topology: Any = None) -> list[Any]:
    """Gang requests of the three roles: learners in one island, servers near them, actors anywhere.

    With ``topology``, a role's ``resources.<role>.nodes`` labels restrict it to the nodes that
    have them all (``PlacementError`` naming the role and the label when no node has one)."""
    from kilorl.placement import Affinity, Demand, GangRequest

    par, res = cfg.parallelism, cfg.resources

    def demand(r: Any) -> Any:
        return Demand.of(r.gpus, r.cpus, r.memory_gb)

    def only(role: str) -> frozenset[str] | None:
        return nodes_with_labels(role, getattr(res, role).nodes, topology)

    policies = learner_roles(cfg)
    if policies:  # several policies: a learner group each, on its own policy's nodes
        learners = [GangRequest(role, par.learner, demand(learner_resources(cfg, p)), (Affinity("same_island"),),
                                collective=True,
                                only_nodes=nodes_with_labels(role, learner_resources(cfg, p).nodes, topology,
                                                             f"resources.policies.{p}.nodes"))
                    for role, p in policies.items()]
    else:
        learners = [GangRequest("learner", par.learner, demand(res.learner), (Affinity("same_island"),),
                                collective=True, only_nodes=only("learner"))]
    requests = [
        *learners,
        GangRequest("parameter_server", par.parameter_server, demand(res.parameter_server),
                    (Affinity("near_role", role=learners[0].role),), only_nodes=only("parameter_server")),
    ]
    if par.actor:  # an offline-only run (``parallelism.actor: 0``) places no actor
        requests.append(GangRequest("actor", par.actor, demand(res.actor), only_nodes=only("actor")))
    return requests


def nodes_with_labels(role: str, labels: list[str], topology: Any, field: str | None = None) -> frozenset[str] | None:
    """Names of ``topology``'s nodes that carry every label of ``labels`` (None: no constraint).

    A label is ``key=value`` or a bare ``key`` (any value); ``field``: the config field the
    labels come from (``resources.<role>.nodes``), named by the error."""
    field = field or f"resources.{role}.nodes"
    if not labels or topology is None:
        return None
    from kilorl.placement import PlacementError

    def has(node: Any, label: str) -> bool:
        key, sep, value = label.partition("=")
        own = dict(node.labels)
        return key in own and (not sep or own[key] == value)

    for label in labels:
        if not any(has(n, label) for n in topology.nodes):
            seen = sorted({f"{k}={v}" for n in topology.nodes for k, v in n.labels if not k.startswith("ray.io/node-id")})
            raise PlacementError(role, f"no node has the label {label!r} ({field}); "
                                       f"the nodes' labels: {', '.join(seen[:12]) or 'none'}")
    fit = frozenset(n.name for n in topology.nodes if all(has(n, label) for label in labels))
    if not fit:
        raise PlacementError(role, f"no node has all of the labels {labels} ({field})")
    return fit


def plan(cfg: Config, topology: Any, policy: str = "binpack-topo", gradient_bytes: float = 400e6) -> Any:
    """Place the config's roles on ``topology``; raises ``PlacementError`` when they do not fit."""
    from kilorl.placement import CapacityState, place

    return place(CapacityState(topology), requests_from_config(cfg, topology), policy, gradient_bytes=gradient_bytes)
