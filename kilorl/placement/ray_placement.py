"""Turn a ``Placement`` into Ray placement groups pinned to the planned nodes.

A bundle is pinned to its planned node in one of two ways. On any Ray cluster, by a label
selector on the node's ``ray.io/node-id`` label, which Ray gives every node
(``create_label_pinned_groups``). Where the user's raylets declare a custom resource
``kilorl_node_<name>`` (``ray start --resources '{"kilorl_node_h100-0000": 1000}'``; see
``ray_node_resources``), the nodes keep those names and each bundle takes a sliver of its
node's resource (``create_placement_groups``). Every instance becomes one bundle holding its
CPU, GPU share and memory. One placement group per role; groups are created all together
or not at all.

Ray picks the device inside a node itself; the planned device indices are advisory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kilorl.placement.scheduler import Placement
from kilorl.placement.topology import Topology

NODE_RESOURCE_PREFIX = "kilorl_node_"
NODE_RESOURCE_AMOUNT = 1000.0
"""What a raylet declares of its own node resource; a bundle takes 1/1000 of one unit."""
BUNDLE_NODE_SHARE = 0.001


def node_resource(node_name: str) -> str:
    return f"{NODE_RESOURCE_PREFIX}{node_name}"


def ray_node_resources(topology: Topology) -> dict[str, dict[str, float]]:
    """Per topology node: the ``--resources`` its raylet must declare."""
    return {n.name: {node_resource(n.name): NODE_RESOURCE_AMOUNT} for n in topology.nodes}


@dataclass(frozen=True)
class RoleGroupSpec:
    """The placement group of one role."""

    role: str
    bundles: list[dict[str, float]]
    """One bundle per instance, in instance order."""
    nodes: list[str]
    """Planned node of each bundle."""
    gpus: list[tuple[int, ...]]
    """Planned device indices of each bundle (advisory)."""
    strategy: str = "PACK"


def placement_group_specs(placement: Placement) -> dict[str, RoleGroupSpec]:
    """Bundles per role; pure data (no Ray needed)."""
    topo = placement.state.topology
    out: dict[str, RoleGroupSpec] = {}
    for role, allocs in placement.by_role().items():
        bundles, nodes, gpus = [], [], []
        for a in sorted(allocs, key=lambda x: x.instance):
            name = topo.nodes[a.node].name
            b: dict[str, float] = {node_resource(name): BUNDLE_NODE_SHARE}
            if a.cpu_milli:
                b["CPU"] = a.cpu_milli / 1000.0
            if a.gpus:
                b["GPU"] = len(a.gpus) * a.gpu_milli / 1000.0
            if a.mem_mib:
                b["memory"] = float(a.mem_mib * 1024 * 1024)
            bundles.append(b)
            nodes.append(name)
            gpus.append(a.gpus)
        out[role] = RoleGroupSpec(role, bundles, nodes, gpus)
    return out


class RayPlacementError(RuntimeError):
    """Ray could not reserve the planned bundles; nothing stays reserved."""


def create_placement_groups(placement: Placement, *, timeout_s: float = 60.0, name_prefix: str = "kilorl") -> dict[str, Any]:
    """Reserve every role's bundles on its planned nodes (needs a connected Ray).

    Returns ``role -> PlacementGroup``; on failure removes what it created and raises.
    """
    import ray
    from ray.util import placement_group, remove_placement_group

    specs = placement_group_specs(placement)
    known = set()
    for node in ray.nodes():
        if node.get("Alive"):
            known |= {k for k in node.get("Resources", {}) if k.startswith(NODE_RESOURCE_PREFIX)}
    missing = sorted({node_resource(n) for s in specs.values() for n in s.nodes} - known)
    if missing:
        raise RayPlacementError(f"no live Ray node declares {', '.join(missing[:5])}"
                                f"{' ...' if len(missing) > 5 else ''} (start raylets with ray_node_resources())")
    groups: dict[str, Any] = {}
    try:
        for role, spec in specs.items():
            groups[role] = placement_group(spec.bundles, strategy=spec.strategy, name=f"{name_prefix}-{role}")
        ready, pending = ray.wait([g.ready() for g in groups.values()], num_returns=len(groups), timeout=timeout_s)
        if pending:
            raise RayPlacementError(f"{len(pending)} placement group(s) not ready after {timeout_s:g}s")
    except BaseException:
        for g in groups.values():
            remove_placement_group(g)
        raise
    return groups


NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray gives every node: its node id (the label selector that pins a bundle to a node)."""


def create_label_pinned_groups(placement: Placement, node_ids: dict[str, str], *, timeout_s: float = 60.0,
                               name_prefix: str = "kilorl") -> dict[str, Any]:
    """Reserve every role's bundles on its planned nodes on any Ray cluster: each bundle carries
    a label selector on the node's ``ray.io/node-id``, so no raylet needs a custom resource.
    ``node_ids``: topology node name -> Ray node id. Returns ``role -> PlacementGroup``; on
    failure removes what it created and raises ``RayPlacementError``."""
    import ray
    from ray.util import placement_group, remove_placement_group

    groups: dict[str, Any] = {}
    try:
        for role, spec in placement_group_specs(placement).items():
            bundles = [{k: v for k, v in b.items() if not k.startswith(NODE_RESOURCE_PREFIX)} for b in spec.bundles]
            selectors = [{NODE_ID_LABEL: node_ids[n]} for n in spec.nodes]
            groups[role] = placement_group(bundles, strategy=spec.strategy, name=f"{name_prefix}-{role}",
                                           bundle_label_selector=selectors)
        _, pending = ray.wait([g.ready() for g in groups.values()], num_returns=len(groups), timeout=timeout_s)
        if pending:
            raise RayPlacementError(f"{len(pending)} placement group(s) not ready after {timeout_s:g}s")
    except BaseException:
        for g in groups.values():
            remove_placement_group(g)
        raise
    return groups


def scheduling_strategy(groups: dict[str, Any], role: str, instance: int) -> Any:
    """The ``scheduling_strategy=`` for instance ``instance`` of ``role``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(placement_group=groups[role], placement_group_bundle_index=instance,
                                            placement_group_capture_child_tasks=True)


def ray_node_ids() -> dict[str, str]:
    """Topology node name -> Ray node id, from the node resources raylets declare."""
    import ray

    out = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for k in node.get("Resources", {}):
            if k.startswith(NODE_RESOURCE_PREFIX):
                out[k[len(NODE_RESOURCE_PREFIX):]] = node["NodeID"]
    return out


def node_affinity_strategies(placement: Placement, *, soft: bool = False) -> dict[str, list[Any]]:
    """Per role, one ``NodeAffinitySchedulingStrategy`` per instance (no reservation)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ids = ray_node_ids()
    out: dict[str, list[Any]] = {}
    for role, spec in placement_group_specs(placement).items():
        try:
            out[role] = [NodeAffinitySchedulingStrategy(node_id=ids[n], soft=soft) for n in spec.nodes]
        except KeyError as err:
            raise RayPlacementError(f"no live Ray node for topology node {err.args[0]!r}") from None
    return out
