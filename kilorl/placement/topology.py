"""The hardware model: nodes, devices, NVLink islands, PCIe switches, NUMA, NICs, switches.

A ``Topology`` is an immutable description; what is in use lives in the scheduler's
``CapacityState``. Distance between two GPUs is a ``LinkClass``; crossing a leaf switch
(through the spine) is NET plus the spine's latency and oversubscription.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from kilorl.placement.links import DEFAULT_LINKS, LinkClass, LinkSpec


@dataclass(frozen=True)
class Gpu:
    """One accelerator and where it sits inside its node."""

    index: int
    """Device index inside the node (NVML / CUDA order)."""
    model: str
    """Model name used for type constraints (``H100``, ``A100``, ``T4``)."""
    memory_gb: float
    """Device memory in GiB."""
    island: int
    """NVLink island id inside the node; GPUs in one island talk over NVLink."""
    numa: int = 0
    """NUMA domain the device's PCIe root hangs off."""
    pcie_switch: int = 0
    """PCIe switch id inside the node (GPUs under one switch are PIX apart)."""


@dataclass(frozen=True)
class Nic:
    """One network interface used for inter-node collectives."""

    name: str
    """Device name (``mlx5_0``)."""
    rdma: bool
    """RDMA-capable (InfiniBand / RoCE); NCCL uses GPUDirect RDMA through it."""
    bandwidth_gbps: float
    """Line rate in GB/s (bytes)."""
    numa: int = 0
    """NUMA domain of the NIC."""


@dataclass(frozen=True)
class Node:
    """One machine."""

    name: str
    cpus: float
    """Schedulable CPU cores."""
    memory_gb: float
    """Schedulable host memory, GiB."""
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]
    leaf: str
    """Leaf (top-of-rack) switch the node is cabled to."""
    failure_domain: str
    """Unit that fails together (rack, power domain); defaults to the leaf switch."""
    numa_domains: int = 1
    """Number of NUMA domains."""
    labels: tuple[tuple[str, str], ...] = ()
    """``(key, value)`` labels of the node (a Ray cluster's node labels, ``ray.io/node-id``
    among them); roles may be restricted to nodes with some (``resources.<role>.nodes``)."""

    def gpu_link(self, a: int, b: int) -> LinkClass:
        """Link class between GPU ``a`` and GPU ``b`` of this node."""
        if a == b:
            return LinkClass.SELF
        ga, gb = self.gpus[a], self.gpus[b]
        if ga.island == gb.island:
            return LinkClass.NVLINK
        if ga.numa != gb.numa:
            return LinkClass.SYS
        if ga.pcie_switch == gb.pcie_switch:
            return LinkClass.PIX
        return LinkClass.PHB

    @property
    def rails(self) -> int:
        """NICs available for inter-node traffic (at least one, a plain Ethernet port)."""
        return max(1, len(self.nics))

    @property
    def nic_bandwidth_gbps(self) -> float | None:
        """Bandwidth of the slowest NIC; None means "use the NET class default"."""
        return min((n.bandwidth_gbps for n in self.nics), default=None)

    @cached_property
    def islands(self) -> dict[int, tuple[int, ...]]:
        """Island id -> GPU indices in it."""
        out: dict[int, list[int]] = {}
        for g in self.gpus:
            out.setdefault(g.island, []).append(g.index)
        return {k: tuple(v) for k, v in sorted(out.items())}


@dataclass(frozen=True)
class Topology:
    """A whole cluster: nodes under leaf switches under one spine."""

    name: str
    nodes: tuple[Node, ...]
    links: dict[LinkClass, LinkSpec] = field(default_factory=lambda: dict(DEFAULT_LINKS))
    """Bandwidth/latency per link class."""
    spine_oversubscription: float = 1.0
    """Leaf uplink oversubscription: NET bandwidth across leaves is divided by it."""
    spine_latency_us: float = 1.0
    """Extra latency of a hop through the spine."""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise ValueError(f"duplicate node name {n.name!r}")
            seen.add(n.name)

    @cached_property
    def index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def leaves(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.leaf for n in self.nodes))

    @property
    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def max_gpus_per_node(self) -> int:
        return max((len(n.gpus) for n in self.nodes), default=0)

    def spec(self, link: LinkClass) -> LinkSpec:
        return self.links.get(link, DEFAULT_LINKS[link])

    def net_spec(self, a: Node, b: Node) -> LinkSpec:
        """Per-rail bandwidth and latency between two nodes (slower NIC wins)."""
        base = self.spec(LinkClass.NET)
        bws = [bw for bw in (a.nic_bandwidth_gbps, b.nic_bandwidth_gbps) if bw is not None]
        bw = min(bws) if bws else base.bandwidth_gbps
        lat = base.latency_us
        if a.leaf != b.leaf:
            bw /= self.spine_oversubscription
            lat += self.spine_latency_us
        return LinkSpec(bandwidth_gbps=bw, latency_us=lat)

    def link(self, node_a: int, gpu_a: int, node_b: int, gpu_b: int) -> LinkClass:
        if node_a != node_b:
            return LinkClass.NET
        return self.nodes[node_a].gpu_link(gpu_a, gpu_b)

    def summary(self) -> str:
        models: dict[str, int] = {}
        for n in self.nodes:
            for g in n.gpus:
                models[g.model] = models.get(g.model, 0) + 1
        gpus = ", ".join(f"{c}x{m}" for m, c in sorted(models.items())) or "no GPUs"
        return f"{self.name}: {len(self.nodes)} nodes, {len(self.leaves)} leaf switches, {gpus}"
