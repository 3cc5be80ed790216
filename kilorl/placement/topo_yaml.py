"""Topology YAML: describe clusters that are not present (docs/placement.md has the format).

Validated by pydantic with unknown keys forbidden; every error names the field path
(``node_types.dgx.gpus.islands``) and what was expected, then the file is rejected whole.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kilorl.placement.links import DEFAULT_LINKS, LinkClass, LinkSpec
from kilorl.placement.topology import Gpu, Nic, Node, Topology


class TopologyError(ValueError):
    """An invalid topology description; the message names the offending field."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class LinkSpecModel(_Spec):
    bandwidth_gbps: float = Field(gt=0)
    """GB/s one direction available to one GPU over this class."""
    latency_us: float = Field(ge=0)
    """One-hop latency, microseconds."""


class GpuSpecModel(_Spec):
    model: str = Field(min_length=1)
    """GPU model name, matched by type constraints (``H100``)."""
    count: int = Field(ge=1, le=64)
    """GPUs per node."""
    memory_gb: float = Field(default=80.0, gt=0)
    """Device memory, GiB."""
    islands: Literal["all", "none"] | list[list[int]] = "none"
    """NVLink islands: ``all`` (one NVSwitch domain), ``none`` (PCIe only) or explicit index lists."""
    numa: list[list[int]] | None = None
    """GPU indices per NUMA domain (default: all in domain 0)."""
    pcie_switches: list[list[int]] | None = None
    """GPU indices per PCIe switch (default: one switch per GPU)."""

    @model_validator(mode="after")
    def _partitions(self) -> GpuSpecModel:
        for name in ("islands", "numa", "pcie_switches"):
            groups = getattr(self, name)
            if groups is None or isinstance(groups, str):
                continue
            flat = [i for g in groups for i in g]
            bad = [i for i in flat if not 0 <= i < self.count]
            if bad:
                raise ValueError(f"{name}: GPU index {bad[0]} out of range 0..{self.count - 1}")
            dup = {i for i in flat if flat.count(i) > 1}
            if dup:
                raise ValueError(f"{name}: GPU index {min(dup)} listed twice")
            if name != "islands" and len(flat) != self.count:
                missing = sorted(set(range(self.count)) - set(flat))
                raise ValueError(f"{name}: GPUs {missing} are in no group (list every GPU once)")
        return self


class NicSpecModel(_Spec):
    name: str = "eth"
    """Device name prefix; ``count`` > 1 appends an index."""
    rdma: bool = False
    """RDMA-capable (InfiniBand / RoCE)."""
    bandwidth_gbps: float = Field(gt=0)
    """Line rate in GB/s (bytes): 400 Gb/s NDR is 50."""
    count: int = Field(default=1, ge=1)
    """NICs of this kind per node (rail-optimized clusters have one per GPU)."""
    numa: int = Field(default=0, ge=0)
    """NUMA domain of the NIC(s)."""


class NodeTypeModel(_Spec):
    cpus: float = Field(gt=0)
    """Schedulable CPU cores."""
    memory_gb: float = Field(gt=0)
    """Schedulable host memory, GiB."""
    numa_domains: int = Field(default=1, ge=1)
    """NUMA domains of the machine."""
    gpus: GpuSpecModel | None = None
    """The node's GPUs (omit for CPU-only nodes)."""
    nics: list[NicSpecModel] = Field(default_factory=list)
    """Network interfaces for inter-node traffic."""

    @model_validator(mode="after")
    def _numa_range(self) -> NodeTypeModel:
        if self.gpus and self.gpus.numa and len(self.gpus.numa) > self.numa_domains:
            raise ValueError(f"gpus.numa lists {len(self.gpus.numa)} domains but numa_domains is {self.numa_domains}")
        for i, nic in enumerate(self.nics):
            if nic.numa >= self.numa_domains:
                raise ValueError(f"nics[{i}].numa={nic.numa} but numa_domains is {self.numa_domains}")
        return self


class NodeGroupModel(_Spec):
    type: str
    """Key into ``node_types``."""
    count: int = Field(ge=1)
    """Number of identical nodes."""
    prefix: str = "node-"
    """Node names are ``{prefix}{i:04d}`` (i counts within the group)."""
    nodes_per_leaf: int = Field(default=32, ge=1)
    """Consecutive nodes cabled to one leaf switch."""
    leaf_prefix: str | None = None
    """Leaf switch names are ``{leaf_prefix}{k}``; default ``{prefix}leaf``."""


class NodeModel(_Spec):
    name: str = Field(min_length=1)
    """Unique node name."""
    type: str
    """Key into ``node_types``."""
    leaf: str = "leaf0"
    """Leaf switch the node is cabled to."""
    failure_domain: str | None = None
    """Fails together with nodes of the same domain; default: the leaf switch."""


class NetworkModel(_Spec):
    spine_oversubscription: float = Field(default=1.0, ge=1.0)
    """Leaf uplink oversubscription (1 = non-blocking fat tree)."""
    spine_latency_us: float = Field(default=1.0, ge=0)
    """Extra latency of going through the spine."""


class TopologyModel(_Spec):
    name: str = "cluster"
    """Cluster name shown in reports."""
    links: dict[str, LinkSpecModel] = Field(default_factory=dict)
    """Per link class (NV, PIX, PXB, PHB, NODE, SYS, NET) overrides of the defaults."""
    network: NetworkModel = Field(default_factory=NetworkModel)
    """Switch fabric above the leaves."""
    node_types: dict[str, NodeTypeModel]
    """Named machine shapes."""
    node_groups: list[NodeGroupModel] = Field(default_factory=list)
    """Blocks of identical nodes (expanded in order)."""
    nodes: list[NodeModel] = Field(default_factory=list)
    """Individually listed nodes (after the groups)."""

    @model_validator(mode="after")
    def _references(self) -> TopologyModel:
        for key in self.links:
            try:
                LinkClass.parse(key)
            except ValueError as err:
                raise ValueError(f"links.{key}: {err}") from None
        known = sorted(self.node_types)
        for where, items in (("node_groups", self.node_groups), ("nodes", self.nodes)):
            for i, item in enumerate(items):
                if item.type not in self.node_types:
                    close = difflib.get_close_matches(item.type, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"{where}[{i}].type: unknown node type {item.type!r}{hint}; defined: {', '.join(known)}")
        if not self.node_groups and not self.nodes:
            raise ValueError("no nodes: give node_groups or nodes")
        return self


def _format(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        got = e.get("input")
        shown = f" (got {got!r})" if got is not None and not isinstance(got, (dict, list)) and e["type"] != "missing" else ""
        lines.append(f"{loc or '<root>'}: {msg}{shown}" if loc else msg)
    return f"invalid topology {source}:\n  " + "\n  ".join(lines)


def _groups(spec: Any, count: int, default: list[list[int]]) -> dict[int, int]:
    groups = default if spec is None else spec
    out = {i: 0 for i in range(count)}
    for gid, members in enumerate(groups):
        for i in members:
            out[i] = gid
    return out


def _node(name: str, t: NodeTypeModel, leaf: str, domain: str | None) -> Node:
    gpus: list[Gpu] = []
    if t.gpus:
        g = t.gpus
        if g.islands == "all":
            islands = [list(range(g.count))]
        elif g.islands == "none":
            islands = [[i] for i in range(g.count)]
        else:
            listed = {i for grp in g.islands for i in grp}
            islands = list(g.islands) + [[i] for i in range(g.count) if i not in listed]
        isl = _groups(islands, g.count, [])
        numa = _groups(g.numa, g.count, [list(range(g.count))])
        sw = _groups(g.pcie_switches, g.count, [[i] for i in range(g.count)])
        gpus = [Gpu(i, g.model, g.memory_gb, isl[i], numa[i], sw[i]) for i in range(g.count)]
    nics: list[Nic] = []
    for spec in t.nics:
        for k in range(spec.count):
            nic_name = f"{spec.name}_{k}" if spec.count > 1 else spec.name
            nics.append(Nic(nic_name, spec.rdma, spec.bandwidth_gbps, spec.numa))
    return Node(name, t.cpus, t.memory_gb, tuple(gpus), tuple(nics), leaf, domain or leaf, t.numa_domains)


def topology_from_dict(data: Any, source: str = "<dict>") -> Topology:
    if not isinstance(data, dict):
        raise TopologyError(f"invalid topology {source}: the top level must be a mapping")
    try:
        m = TopologyModel.model_validate(data)
    except ValidationError as err:
        raise TopologyError(_format(err, source)) from None
    nodes: list[Node] = []
    for grp in m.node_groups:
        leaf_prefix = grp.leaf_prefix if grp.leaf_prefix is not None else f"{grp.prefix}leaf"
        t = m.node_types[grp.type]
        for i in range(grp.count):
            nodes.append(_node(f"{grp.prefix}{i:04d}", t, f"{leaf_prefix}{i // grp.nodes_per_leaf}", None))
    for spec in m.nodes:
        nodes.append(_node(spec.name, m.node_types[spec.type], spec.leaf, spec.failure_domain))
    links = dict(DEFAULT_LINKS)
    for key, ls in m.links.items():
        links[LinkClass.parse(key)] = LinkSpec(ls.bandwidth_gbps, ls.latency_us)
    try:
        return Topology(m.name, tuple(nodes), links, m.network.spine_oversubscription, m.network.spine_latency_us)
    except ValueError as err:
        raise TopologyError(f"invalid topology {source}: nodes: {err}") from None


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology YAML file."""
    p = Path(path)
    if not p.is_file():
        raise TopologyError(f"topology file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise TopologyError(f"{p}: not valid YAML: {err}") from None
    return topology_from_dict(data, str(p))


def uniform_topology(
    nodes: int,
    gpus_per_node: int,
    *,
    gpu_model: str = "H100",
    nodes_per_leaf: int = 16,
    cpus: float = 192.0,
    memory_gb: float = 2048.0,
    nvlink: bool = True,
) -> Topology:
    """An ``N x G`` cluster of identical NVLink nodes, 16 per leaf, rail-optimized NICs."""
    data = {
        "name": f"{nodes}x{gpus_per_node}x{gpu_model}",
        "node_types": {
            "gpu": {
                "cpus": cpus,
                "memory_gb": memory_gb,
                "numa_domains": 2 if gpus_per_node >= 2 else 1,
                **(
                    {
                        "gpus": {
                            "model": gpu_model,
                            "count": gpus_per_node,
                            "islands": "all" if nvlink else "none",
                            **(
                                {"numa": [list(range(gpus_per_node // 2)), list(range(gpus_per_node // 2, gpus_per_node))]}
                                if gpus_per_node >= 2
                                else {}
                            ),
                        }
                    }
                    if gpus_per_node
                    else {}
                ),
                "nics": [{"name": "mlx5", "rdma": True, "bandwidth_gbps": 50.0, "count": max(1, gpus_per_node)}],
            }
        },
        "node_groups": [{"type": "gpu", "count": nodes, "prefix": "node-", "nodes_per_leaf": nodes_per_leaf,
                         "leaf_prefix": "leaf-"}],
    }
    return topology_from_dict(data, "<uniform>")
