"""The run's roles placed by the scheduler: the plan ``kilorl plan`` prints, reserved in Ray.

The topology is read from the connected Ray cluster (its real CPUs, GPUs, memory, labels), the
gangs come from ``cfg.resources`` and ``cfg.parallelism`` through
``kilorl.trainer.planning.plan`` (the function ``kilorl plan`` and ``Cluster.plan`` use), and
the learners', actors' and parameter servers' bundles are reserved as Ray placement groups
pinned to the planned nodes (``kilorl.placement.ray_placement``: by Ray's ``ray.io/node-id``
label, so any cluster started with plain ``ray start`` works). Parameter-server shard ``k``
lives in the store worker of its planned node (``shard_nodes``): that node's worker runs in
the shard's bundle (``resources.parameter_server``), and a publish writes the shard there.

One deviation from the dry run: a learner on ``train.device: cpu`` reserves no GPU (it would
never use one), so a CPU run of a config written for GPUs still starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kilorl.config import Config
from kilorl.config_policies import learner_resources, learner_roles

RESERVED_ROLES = ("learner", "actor", "parameter_server")
"""Roles reserved as placement groups: learners and actors run in theirs, a node's store
worker in the bundle of the first parameter-server shard planned there."""
LOCAL_NODE = "local"
"""Topology name of the node of an embedded Ray this run starts (declared as its node resource)."""
READY_TIMEOUT_S = 30.0


class RolePlacementError(RuntimeError):
    """The roles cannot be placed or reserved; the message names the role and the resource."""


def training_config(cfg: Config) -> Config:
    """``cfg`` with what the roles really reserve: no learner GPU when learners run on the CPU."""
    res = cfg.resources
    if cfg.train.device != "cpu" or (res.learner.gpus == 0 and all(r.gpus == 0 for r in res.policies.values())):
        return cfg
    learner = res.learner.model_copy(update={"gpus": 0.0})
    policies = {p: r.model_copy(update={"gpus": 0.0}) for p, r in res.policies.items()}
    return cfg.model_copy(update={"resources": res.model_copy(update={"learner": learner, "policies": policies})})


def reserved_roles(cfg: Config) -> tuple[str, ...]:
    """``RESERVED_ROLES``, with each policy's learner role (``learner/<policy>``) in a run of several."""
    return RESERVED_ROLES + tuple(learner_roles(cfg))


def local_needs(cfg: Config) -> tuple[float, float]:
    """(CPUs, memory bytes) every planned instance takes together: what an embedded Ray must declare."""
    par, res = cfg.parallelism, training_config(cfg).resources
    each = [(par.actor, res.actor), (par.parameter_server, res.parameter_server)]
    policies = learner_roles(cfg)
    if policies:  # a learner group per policy
        each += [(par.learner, learner_resources(training_config(cfg), p)) for p in policies.values()]
    else:
        each.append((par.learner, res.learner))
    cpus = sum(n * r.cpus for n, r in each)
    mem = sum(n * r.memory_gb for n, r in each) * 2**30
    return cpus, mem


def ray_topology(address: str | None = None) -> Any:
    """The connected Ray cluster's live nodes as the scheduler's topology: what Ray reports
    of each (node id, CPUs, GPUs and their model, memory, labels); no custom resource needed.
    ``kilorl train``, ``kilorl plan --address`` and ``kilorl cluster describe --address`` all
    plan on this one topology (``address`` names it ``ray:<address>``; nothing else differs).

    A node is called ``ray-<first 12 hex digits of its node id>``, or ``<name>`` where its
    raylet declares ``kilorl_node_<name>`` (``ray_node_resources``); when some nodes declare
    one, only those take roles (a head node without one is left out). Every node keeps its
    Ray labels, ``ray.io/node-id`` among them, which pins the roles' bundles to it. The
    driver's own node takes its GPUs' NVLink islands from discovery where it sees as many
    GPUs as Ray reports; Ray knows no links, so another node's GPUs are taken as one island.
    """
    import ray

    from kilorl.placement import Gpu, Node, Topology
    from kilorl.placement.ray_placement import NODE_ID_LABEL, NODE_RESOURCE_PREFIX

    alive = [info for info in ray.nodes() if info.get("Alive")]
    named = [info for info in alive if any(k.startswith(NODE_RESOURCE_PREFIX) for k in info.get("Resources", {}))]
    here = ray.get_runtime_context().get_node_id()
    nodes = []
    for info in named or alive:
        res = info.get("Resources", {})
        declared = [k[len(NODE_RESOURCE_PREFIX):] for k in res if k.startswith(NODE_RESOURCE_PREFIX)]
        name = declared[0] if declared else f"ray-{info['NodeID'][:12]}"
        model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "GPU")
        gpus = tuple(Gpu(g, model, 0.0, island=0) for g in range(int(res.get("GPU", 0))))
        if gpus and info["NodeID"] == here:
            gpus = _discovered_gpus(gpus)
        labels = {**(info.get("Labels") or {}), NODE_ID_LABEL: info["NodeID"]}
        nodes.append(Node(name, float(res.get("CPU", 0)), res.get("memory", 0) / 2**30, gpus, (), "leaf-0", "leaf-0",
                          labels=tuple(sorted(labels.items()))))
    return Topology(f"ray:{address or 'attached'}", tuple(nodes))


def _discovered_gpus(reported: tuple[Any, ...]) -> tuple[Any, ...]:
    """This machine's GPUs with their NVLink islands, when discovery sees as many as Ray reports."""
    from kilorl.placement.discovery import discover

    local = discover(probe=False).to_node()
    return local.gpus if len(local.gpus) == len(reported) else reported


def plan_summary(placement: Any) -> dict[str, list[str]]:
    """Role -> the topology node of each instance, in instance order: the plan ``kilorl train``
    prints at start-up and ``kilorl plan --address`` prints for the same cluster."""
    topo = placement.state.topology
    return {role: [topo.nodes[a.node].name for a in allocs] for role, allocs in placement.by_role().items()}


def topology_node_ids(topology: Any) -> dict[str, str]:
    """Topology node name -> Ray node id (the ``ray.io/node-id`` label ``ray_topology`` keeps)."""
    from kilorl.placement.ray_placement import NODE_ID_LABEL

    return {n.name: dict(n.labels)[NODE_ID_LABEL] for n in topology.nodes}


@dataclass
class RolePlacement:
    """A run's reserved placement: per role, one placement group and the plan behind it."""

    placement: Any
    groups: dict[str, Any] = field(default_factory=dict)
    """role -> Ray ``PlacementGroup`` (learner, actor, parameter_server)."""
    node_ids: dict[str, str] = field(default_factory=dict)
    """Topology node name -> Ray node id, for the planned nodes."""

    @property
    def specs(self) -> dict[str, Any]:
        from kilorl.placement.ray_placement import placement_group_specs

        return placement_group_specs(self.placement)

    def planned_nodes(self, role: str) -> list[str]:
        """Topology node of each instance of ``role``, in instance order."""
        return self.specs[role].nodes

    def shard_nodes(self) -> list[str]:
        """Ray node id of each parameter-server shard's planned node, in shard order: where
        its bytes live (``StoreParameterStore(shard_homes=...)``)."""
        return [self.node_ids[n] for n in self.planned_nodes("parameter_server")]

    def store_worker_options(self) -> dict[str, dict[str, Any]]:
        """Ray node id -> ``.options(...)`` of that node's store worker: the bundle of the first
        shard planned there, so the worker holds ``resources.parameter_server`` (other
        nodes' workers take no resources)."""
        out: dict[str, dict[str, Any]] = {}
        for k, node in enumerate(self.shard_nodes()):
            out.setdefault(node, self.options("parameter_server", k))
        return out

    def options(self, role: str, instance: int) -> dict[str, Any]:
        """``.options(...)`` of instance ``instance``: its bundle's resources and strategy."""
        from kilorl.placement.ray_placement import scheduling_strategy

        bundle = self.specs[role].bundles[instance]
        opts: dict[str, Any] = {"num_cpus": bundle.get("CPU", 0.0), "num_gpus": bundle.get("GPU", 0.0),
                                "scheduling_strategy": scheduling_strategy(self.groups, role, instance)}
        if bundle.get("memory"):
            opts["memory"] = bundle["memory"]
        return opts

    def remove(self) -> None:
        """Release every group (idempotent)."""
        from ray.util import remove_placement_group

        for group in self.groups.values():
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 - already removed is fine: the goal is "not reserved"
                pass
        self.groups = {}


def reserve(cfg: Config, *, timeout_s: float = READY_TIMEOUT_S) -> RolePlacement:
    """Plan ``cfg``'s roles on the connected Ray cluster and reserve the learners' and actors' bundles."""
    from kilorl.placement import PlacementError
    from kilorl.trainer.planning import plan

    topology = ray_topology()
    try:
        placement = plan(training_config(cfg), topology)
    except PlacementError as err:
        have = ", ".join(f"{n.name}: {n.cpus:g} CPU, {len(n.gpus)} GPU, {n.memory_gb:.1f} GiB" for n in topology.nodes)
        raise RolePlacementError(f"{err} (see resources.{err.role}); Ray has {have}") from err
    reserved = _Only(placement, reserved_roles(cfg))
    out = RolePlacement(reserved, node_ids=topology_node_ids(topology))
    try:
        out.groups = _create_groups(reserved, topology, timeout_s)
    except BaseException:
        out.remove()
        raise
    return out


def _create_groups(placement: Any, topology: Any, timeout_s: float) -> dict[str, Any]:
    """Groups pinned by the nodes' ``kilorl_node_*`` resources where every node declares one,
    else by their ``ray.io/node-id`` labels (any Ray cluster)."""
    import ray

    from kilorl.placement.ray_placement import (
        RayPlacementError,
        create_label_pinned_groups,
        create_placement_groups,
        node_resource,
    )

    declared = {k for info in ray.nodes() if info.get("Alive") for k in info.get("Resources", {})}
    try:
        if all(node_resource(n.name) in declared for n in topology.nodes):
            return create_placement_groups(placement, timeout_s=timeout_s)
        return create_label_pinned_groups(placement, topology_node_ids(topology), timeout_s=timeout_s)
    except RayPlacementError as err:
        raise RolePlacementError(f"Ray could not reserve the planned roles: {err}") from err


@dataclass
class _Only:
    """A placement seen through some of its roles (what ``placement_group_specs`` reads)."""

    whole: Any
    roles: tuple[str, ...]

    @property
    def state(self) -> Any:
        return self.whole.state

    def by_role(self) -> dict[str, list[Any]]:
        return {r: a for r, a in self.whole.by_role().items() if r in self.roles}
