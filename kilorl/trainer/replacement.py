"""Where a migrated role's replacement goes: the scheduler's choice on the cluster as it is now."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kilorl.placement.ray_placement import NODE_RESOURCE_PREFIX
from kilorl.roles.monitoring import node_label


def replacement_node(nodes: list[Mapping[str, Any]], available: Mapping[str, Mapping[str, float]],
                     need: Mapping[str, float], exclude: str, role: str = "replacement") -> str | None:
    """The Ray node id the scheduler places one instance needing ``need`` (node resources) on.

    The cluster it sees is every alive node but the suspect one (``exclude``, a node label)
    with what is free there now (Ray's available resources: placement-group reservations
    taken out). When some nodes declare a kilorl node resource (placement-managed
    clusters), only those take roles, as at start-up. The policy is the trainer's own
    (``binpack-topo``): the node where the instance fits best, as at start-up. None when
    no node has room.
    """
    from kilorl.placement import CapacityState, Demand, GangRequest, Gpu, Node, PlacementError, Topology, place

    alive = [n for n in nodes if n.get("Alive")]
    named = [n for n in alive if any(k.startswith(NODE_RESOURCE_PREFIX) for k in n.get("Resources", {}))]
    ids, shells, fractions = [], [], []
    for n in named or alive:
        if node_label(n["NodeID"]) == exclude:
            continue
        free = available.get(n["NodeID"], {})
        gpus = max(free.get("GPU", 0.0), 0.0)
        whole = int(gpus + 1e-9)
        devices = tuple(Gpu(g, "GPU", 0.0, island=0) for g in range(whole + (gpus - whole > 1e-9)))
        ids.append(n["NodeID"])
        fractions.append(gpus - whole)
        shells.append(Node(f"n{len(ids)}", max(free.get("CPU", 0.0), 0.0), max(free.get("memory", 0.0), 0.0) / 2**30,
                           devices, (), "leaf-0", "leaf-0"))
    if not ids:
        return None
    state = CapacityState(Topology("migration", tuple(shells)))
    for i, frac in enumerate(fractions):
        if frac > 1e-9:  # a device partly taken: only its free share is left
            state.gpu_free[i, len(shells[i].gpus) - 1] = int(frac * 1000)
    demand = Demand.of(need.get("GPU", 0.0), need.get("CPU", 0.0), need.get("memory", 0.0) / 2**30)
    try:
        placed = place(state, [GangRequest(role, 1, demand)], "binpack-topo")
    except PlacementError:
        return None
    return ids[placed.allocations[0].node]


def available_per_node() -> dict[str, dict[str, float]]:
    """Free resources per Ray node id, placement-group reservations taken out.

    Ray 2.x has no public per-node call for this; its own ``ray status`` uses this one.
    """
    from ray._private.state import available_resources_per_node

    return available_resources_per_node()


def ray_nodes() -> list[dict[str, Any]]:
    import ray

    return ray.nodes()
