"""``Cluster``: the user's handle on where a run executes.

Three kinds: *attached* (an ``address``, or nothing given while Ray already runs in
this process: the real nodes and resources are read from Ray; ``nodes``/``gpus_per_node``
given with an address are checked against them), *described* (``nodes``/``gpus_per_node``
without an address: hardware on paper, for planning; nothing starts, and training on it
is refused) and *local* (nothing given, no Ray: a run starts an embedded Ray here).
``describe()`` and ``plan(config)`` work on all three.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from kilorl.config import Config
from kilorl.trainer.ray_auth import use_token_auth
from kilorl.trainer.ray_start import init_embedded_ray

ROLE_MODULES = ("kilorl.roles.prestart",)
"""What an embedded Ray's prestarted workers import before they take work (Ray's
``preload_python_modules``). Ray starts them near the end of ``ray.init()``, and they wait
idle for the roles. A role's first act is importing torch, gymnasium and kiloRL, about
1.4 s of CPU. Preloaded, that import overlaps the rest of Ray's start. ``kilorl.roles.prestart``
imports both roles with the garbage collector paused.

Measured on a 2-core VM (``benchmarks/startup_breakdown.py``, 5 alternating runs): the
roles took 1.81 s preloaded against 2.04 s without, and ``ray.init()`` was unchanged. Its
run-to-run spread, 2.4-4.1 s, hides any cost of its own."""

EMBEDDED_RAY_CONFIG = {
    "raylet_client_connect_timeout_milliseconds": 20,
    "raylet_client_num_connect_attempts": 500,
}
"""Ray settings of an embedded Ray, besides the preload. Ray's processes connect to each
other's sockets with retries, and wait ``raylet_client_connect_timeout_milliseconds``
(default 1000) before each retry. The raylet connects to its own object store, which it
starts on another thread, so a start that loses that race waits a whole second. On the
2-core VM that happened in 2 of 5 bare ``ray.init()`` calls; with 20 ms, in none of 5
(``docs/benchmarks.md``, "Ray's one-second retry"). 500 attempts keep the time before a
connection is given up at 10 s, as Ray's defaults (10 x 1 s) give."""

TORCH_BACKENDS = ("gloo", "nccl", "mpi", "ucc")
"""torch.distributed's built-in backend names (a described cluster may have any of them)."""


class ClusterError(ValueError):
    """A cluster that cannot be used as asked; the message says why and what is available."""


def local_backends() -> list[str]:
    """Backends usable on this machine: built-ins that work here plus registered vendor plugins."""
    import torch
    import torch.distributed as dist

    have = []
    if dist.is_gloo_available():
        have.append("gloo")
    if dist.is_nccl_available() and torch.cuda.is_available():
        have.append("nccl")
    if dist.is_mpi_available():
        have.append("mpi")
    if getattr(dist, "is_ucc_available", lambda: False)():
        have.append("ucc")
    have += [name.lower() for name in getattr(dist.Backend, "_plugins", {})]
    return have


def _registered_plugins() -> list[str]:
    import torch.distributed as dist

    return [name.lower() for name in getattr(dist.Backend, "_plugins", {})]


@dataclass
class ClusterDescription:
    """What ``describe()`` returns: nodes, their devices, the links, and (with a config) the roles."""

    kind: Literal["local", "attached", "described"]
    name: str
    backend: str
    """The learners' communication backend ``communication_backend`` resolves to."""
    nodes: list[dict[str, Any]]
    """Per node: name, cpus, memory_gb, gpus (model per device), islands (NVLink groups)."""
    links: dict[str, dict[str, float]]
    """Per link class: bandwidth (GB/s) and latency (us) the planner assumes."""
    roles: dict[str, list[str]] = field(default_factory=dict)
    """Role -> the node of each instance (empty without a config)."""

    def render(self, max_nodes: int = 8) -> str:
        lines = [f"cluster   {self.name} ({self.kind}), backend {self.backend}",
                 f"nodes     {len(self.nodes)}, {sum(len(n['gpus']) for n in self.nodes)} GPUs"]
        for n in self.nodes[:max_nodes]:
            gpus = ", ".join(f"{c}x{m}" for m, c in _count(n["gpus"]).items()) or "no GPUs"
            islands = f", NVLink islands {n['islands']}" if n["islands"] and len(n["gpus"]) > 1 else ""
            lines.append(f"  {n['name']:<20} {n['cpus']:g} CPUs, {n['memory_gb']:g} GiB, {gpus}{islands}")
        if len(self.nodes) > max_nodes:
            lines.append(f"  ... {len(self.nodes) - max_nodes} more")
        lines.append("links     " + ", ".join(f"{k} {v['bandwidth_gbps']:g} GB/s {v['latency_us']:g} us"
                                              for k, v in self.links.items()))
        for role, where in self.roles.items():
            per = _count(where)
            shown = ", ".join(f"{node} x{c}" for node, c in list(per.items())[:4])
            more = f", ... (+{len(per) - 4} nodes)" if len(per) > 4 else ""
            lines.append(f"role      {role}: {len(where)} on {len(per)} node(s): {shown}{more}")
        return "\n".join(lines)


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


@dataclass
class Cluster:
    """Where a run executes; see the module docstring for the three kinds.

    ``communication_backend``: ``auto`` (nccl with CUDA, else gloo), ``gloo``, ``nccl``,
    or a vendor backend registered with ``torch.distributed`` (e.g. ``mxlink`` once its
    plugin is installed). On a local or attached cluster the backend must work here; a
    described cluster accepts torch's built-in names too (its hardware is elsewhere).
    """

    nodes: int | None = None
    gpus_per_node: int | None = None
    communication_backend: str = "auto"
    address: str | None = None

    def __post_init__(self) -> None:
        if self.nodes is not None and self.nodes < 1:
            raise ClusterError(f"nodes={self.nodes}: a cluster has at least one node")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise ClusterError(f"gpus_per_node={self.gpus_per_node}: must be >= 0")
        self._check_backend()

    # ---- kind and backend -----------------------------------------------------------------
    @property
    def kind(self) -> Literal["local", "attached", "described"]:
        if self.address is not None:
            return "attached"
        if self.nodes is not None or self.gpus_per_node is not None:
            return "described"
        return "attached" if _ray_running() else "local"

    def _check_backend(self) -> None:
        want = self.communication_backend
        if want == "auto":
            return
        if self.kind == "described":
            allowed = list(dict.fromkeys([*TORCH_BACKENDS, *_registered_plugins()]))
            where = "torch.distributed's backends and the vendor plugins registered here"
        else:
            allowed = local_backends()
            where = "usable on this machine"
        if want not in allowed:
            raise ClusterError(f"communication_backend={want!r} is not available; {where}: "
                               f"{', '.join(allowed) or 'none'} (or 'auto')")

    def backend_for(self, device: str) -> str:
        """The concrete backend learners on ``device`` (cpu/cuda/auto) use."""
        if self.communication_backend != "auto":
            self._check_backend()
            return self.communication_backend
        if device == "cpu":
            return "gloo"  # decided without importing torch (start-up: the driver never needs it here)
        import torch

        cuda = device == "cuda" or torch.cuda.is_available()
        return "nccl" if cuda and "nccl" in local_backends() else "gloo"

    # ---- running ----------------------------------------------------------------------------
    def connect(self, num_cpus_needed: float, memory_needed: float = 0.0) -> bool:
        """Initialize Ray if needed; returns True when this call started it.

        An embedded Ray declares at least ``num_cpus_needed`` CPUs and ``memory_needed`` bytes
        (logical amounts, so the planned roles fit on a small machine) and names its node
        ``local`` to the placement layer (``kilorl.trainer.role_placement``).
        """
        import ray

        if self.kind == "described":
            raise ClusterError(f"Cluster(nodes={self.nodes}, gpus_per_node={self.gpus_per_node}) is a described "
                               "cluster (for describe/plan); to train, give address='auto' (or a Ray address) "
                               "or omit nodes/gpus_per_node to train on this machine")
        if ray.is_initialized():
            self._check_expectations()
            return False
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        use_token_auth(embedded=self.address is None)  # Ray's default, without its warning (ray_auth.py)
        if self.address is None:
            # "local" always starts a private instance; without it Ray joins whatever
            # `ray start` cluster last ran on this machine. Logical CPUs: every role must
            # fit even on a 2-core laptop; the OS shares the cores.
            kwargs["address"] = "local"
            kwargs["num_cpus"] = max(os.cpu_count() or 1, math.ceil(num_cpus_needed))
            kwargs["resources"] = _local_node_resources()
            if memory_needed > _default_memory():
                kwargs["_memory"] = int(memory_needed)
            kwargs["_system_config"] = {"preload_python_modules": list(ROLE_MODULES), **EMBEDDED_RAY_CONFIG}
            init_embedded_ray(**kwargs)
        else:
            kwargs["address"] = self.address
            ray.init(**kwargs)
        try:
            self._check_expectations()
        except ClusterError:
            ray.shutdown()
            raise
        return True

    def _check_expectations(self) -> None:
        """``nodes``/``gpus_per_node`` given with an address: the real cluster must have them."""
        if self.nodes is None and self.gpus_per_node is None:
            return
        import ray

        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in alive]
        if (self.nodes is not None and len(alive) < self.nodes) or (
            self.gpus_per_node is not None and sum(g >= self.gpus_per_node for g in gpus) < (self.nodes or 1)
        ):
            raise ClusterError(f"Cluster(nodes={self.nodes}, gpus_per_node={self.gpus_per_node}) but Ray at "
                               f"{self.address or 'this process'} has {len(alive)} node(s) with GPUs {gpus}")

    # ---- describing and planning --------------------------------------------------------------
    def topology(self) -> Any:
        """The hardware as the scheduler sees it (Ray's nodes when attached, this machine when local)."""
        from kilorl.placement import uniform_topology

        kind = self.kind
        if kind == "described":
            return uniform_topology(self.nodes or 1, self.gpus_per_node or 0)
        if kind == "attached":
            return _attached_topology(self.address)
        return _local_topology()

    def describe(self, config: Config | None = None) -> ClusterDescription:
        """Nodes, devices, links and (given a config) where its roles would be placed."""
        topo = self.topology()
        kind = self.kind
        backend = self.communication_backend
        if backend == "auto":
            backend = ("nccl" if topo.total_gpus else "gloo") if kind == "described" else self.backend_for("auto")
        nodes = [{"name": n.name, "cpus": n.cpus, "memory_gb": round(n.memory_gb, 2), "gpus": [g.model for g in n.gpus],
                  "islands": [list(v) for v in n.islands.values()]} for n in topo.nodes]
        links = {lc.name: {"bandwidth_gbps": s.bandwidth_gbps, "latency_us": s.latency_us} for lc, s in topo.links.items()}
        roles: dict[str, list[str]] = {}
        if config is not None:
            placement = self.plan(config, topo)
            for role, allocs in placement.by_role().items():
                roles[role] = [topo.nodes[a.node].name for a in allocs]
        return ClusterDescription(kind, topo.name, backend, nodes, links, roles)

    def plan(self, config: Config, topology: Any = None, policy: str = "binpack-topo") -> Any:
        """The dry run ``kilorl plan`` prints: a ``Placement`` of the config's roles here. On an
        attached cluster, what ``kilorl train`` would reserve there (``training_config``: a
        learner on ``train.device: cpu`` takes no GPU), so the two plans are one."""
        from kilorl.trainer.planning import plan
        from kilorl.trainer.role_placement import training_config

        if self.kind == "attached":
            config = training_config(config)
        return plan(config, topology if topology is not None else self.topology(), policy)


def _local_node_resources() -> dict[str, float]:
    from kilorl.placement.ray_placement import NODE_RESOURCE_AMOUNT, node_resource
    from kilorl.trainer.role_placement import LOCAL_NODE

    return {node_resource(LOCAL_NODE): NODE_RESOURCE_AMOUNT}


def _default_memory() -> float:
    """A lower bound of the ``memory`` an embedded Ray declares by itself (about 70% of free RAM)."""
    import psutil

    return 0.5 * psutil.virtual_memory().available


def _ray_running() -> bool:
    import sys

    ray = sys.modules.get("ray")  # never import Ray just to ask
    return bool(ray is not None and ray.is_initialized())


def _local_topology() -> Any:
    from kilorl.placement import Topology
    from kilorl.placement.discovery import discover

    node = discover(probe=False).to_node()
    return Topology(f"local:{node.name}", (node,))


def _attached_topology(address: str | None) -> Any:
    """Ray's alive nodes, as ``kilorl train`` sees them (``role_placement.ray_topology``)."""
    import ray

    from kilorl.trainer.role_placement import ray_topology

    started = not ray.is_initialized()
    if started:
        use_token_auth(embedded=address in (None, "local"))
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        return ray_topology(address)
    finally:
        if started:
            ray.shutdown()
