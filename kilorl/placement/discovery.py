"""What this machine has: CPUs, NUMA domains, memory, GPUs and their links, RDMA NICs.

GPU facts come from an ``NvmlSource`` (the real NVML or a recording); CPU, NUMA and RDMA
facts from ``/proc`` and ``/sys`` (roots are parameters so tests can point elsewhere).
"""

from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kilorl.placement.links import NVML_LEVEL_TO_CLASS, LinkClass
from kilorl.placement.nvml import NvmlSource, NvmlUnavailable, PynvmlSource
from kilorl.placement.topology import Gpu, Nic, Node


@dataclass
class NumaDomain:
    id: int
    cpus: str
    """Kernel cpulist (``0-15,32-47``)."""
    memory_gb: float | None


@dataclass
class GpuInfo:
    index: int
    name: str
    memory_gb: float
    uuid: str
    pci_bus_id: str
    numa: int | None
    island: int
    """NVLink island (GPUs joined by NVLink directly or through NVSwitch)."""


@dataclass
class RdmaDevice:
    name: str
    ports: list[dict[str, str]]
    """Per port: ``port``, ``state``, ``rate``, ``link_layer`` as the kernel reports them."""


@dataclass
class HostTopology:
    hostname: str
    cpu_model: str
    logical_cpus: int
    physical_cores: int | None
    memory_gb: float
    numa: list[NumaDomain]
    gpus: list[GpuInfo] = field(default_factory=list)
    gpu_links: list[list[str]] = field(default_factory=list)
    """Pairwise link class labels (NV, PIX, PXB, PHB, NODE, SYS; X on the diagonal)."""
    gpu_status: str = ""
    """``N GPUs (driver ...)`` or why none was found."""
    rdma: list[RdmaDevice] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_node(self, leaf: str = "leaf0") -> Node:
        """This machine as a scheduler node (NICs from RDMA ports' rates)."""
        gpus = tuple(
            Gpu(g.index, g.name, g.memory_gb, g.island, g.numa or 0, g.index) for g in self.gpus
        )
        nics = []
        for dev in self.rdma:
            for p in dev.ports:
                m = re.match(r"([\d.]+)\s*Gb", p.get("rate", ""))
                nics.append(Nic(f"{dev.name}/{p['port']}", True, float(m.group(1)) / 8 if m else 12.5))
        return Node(self.hostname, float(self.logical_cpus), self.memory_gb, gpus, tuple(nics), leaf, leaf,
                    max(1, len(self.numa)))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def read_numa(root: str | Path = "/sys/devices/system/node") -> list[NumaDomain]:
    out = []
    base = Path(root)
    for d in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        mem = None
        m = re.search(r"MemTotal:\s+(\d+)\s+kB", _read(d / "meminfo"))
        if m:
            mem = round(int(m.group(1)) / 1024**2, 2)
        out.append(NumaDomain(int(d.name[4:]), _read(d / "cpulist"), mem))
    return out


def read_rdma(root: str | Path = "/sys/class/infiniband") -> list[RdmaDevice]:
    base = Path(root)
    out = []
    if not base.is_dir():
        return out
    for dev in sorted(base.iterdir()):
        ports = []
        for port in sorted((dev / "ports").glob("*"), key=lambda p: p.name):
            ports.append({"port": port.name, "state": _read(port / "state"), "rate": _read(port / "rate"),
                          "link_layer": _read(port / "link_layer")})
        out.append(RdmaDevice(dev.name, ports))
    return out


def _cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    for line in _read(Path(cpuinfo)).splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def read_gpus(source: NvmlSource) -> tuple[list[GpuInfo], list[list[str]], str]:
    """GPUs, pairwise link labels, and a status line (why there are none, if none)."""
    try:
        source.open()
    except NvmlUnavailable as err:
        return [], [], f"no GPU found ({err})"
    try:
        n = source.device_count()
        if n == 0:
            return [], [], f"no GPU found (NVML driver {source.driver_version()} reports 0 devices)"
        bus = [source.pci_bus_id(i).lower() for i in range(n)]
        remotes = [[r.lower() for r in source.nvlink_remotes(i)] for i in range(n)]
        # Union-find over NVLink: direct GPU-GPU links, or links into a (non-GPU) NVSwitch.
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        switch_owner: dict[str, int] = {}
        for i in range(n):
            for r in remotes[i]:
                j = bus.index(r) if r in bus else None
                if j is None:
                    j = switch_owner.setdefault("nvswitch", i)
                parent[find(i)] = find(j)
        roots = {r: k for k, r in enumerate(dict.fromkeys(find(i) for i in range(n)))}
        gpus = [
            GpuInfo(i, source.name(i), round(source.memory_total(i) / 1024**3, 2), source.uuid(i), bus[i],
                    source.numa_node(i), roots[find(i)])
            for i in range(n)
        ]
        links = []
        for i in range(n):
            row = []
            for j in range(n):
                if i == j:
                    row.append("X")
                elif gpus[i].island == gpus[j].island and (remotes[i] or remotes[j]):
                    row.append(LinkClass.NVLINK.label)
                else:
                    level = source.common_ancestor(i, j)
                    row.append(NVML_LEVEL_TO_CLASS.get(level, LinkClass.SYS).label)
            links.append(row)
        return gpus, links, f"{n} GPU(s), NVIDIA driver {source.driver_version()}"
    finally:
        source.close()


def discover(
    nvml: NvmlSource | None = None,
    *,
    sys_root: str | Path = "/sys",
    probe: bool = True,
) -> HostTopology:
    """Read this machine (``nvml`` defaults to the real library)."""
    import psutil

    root = Path(sys_root)
    gpus, links, status = read_gpus(nvml if nvml is not None else PynvmlSource())
    host = HostTopology(
        hostname=socket.gethostname(),
        cpu_model=_cpu_model(),
        logical_cpus=os.cpu_count() or 1,
        physical_cores=psutil.cpu_count(logical=False),
        memory_gb=round(psutil.virtual_memory().total / 1024**3, 2),
        numa=read_numa(root / "devices/system/node"),
        gpus=gpus,
        gpu_links=links,
        gpu_status=status,
        rdma=read_rdma(root / "class/infiniband"),
    )
    if probe:
        from kilorl.placement.probe import gpu_copy_gbps, host_memcpy_gbps

        host.probes["host_memcpy"] = host_memcpy_gbps()
        host.probes["gpu_copy"] = gpu_copy_gbps() if gpus else {"status": "skipped: no GPU found"}
    return host


def render(host: HostTopology) -> str:
    """Human-readable report (what ``kilorl topo`` prints)."""
    lines = [f"host      {host.hostname}",
             f"cpu       {host.cpu_model}: {host.logical_cpus} logical CPUs, {host.physical_cores} physical cores",
             f"memory    {host.memory_gb} GiB",
             f"numa      {len(host.numa)} domain(s)"]
    for d in host.numa:
        lines.append(f"  node{d.id}   cpus {d.cpus or '?'}, {d.memory_gb if d.memory_gb is not None else '?'} GiB")
    lines.append(f"gpus      {host.gpu_status}")
    for g in host.gpus:
        lines.append(f"  gpu{g.index}    {g.name}, {g.memory_gb} GiB, bus {g.pci_bus_id}, numa {g.numa}, island {g.island}")
    if host.gpu_links:
        n = len(host.gpu_links)
        lines.append("  links   " + " ".join(f"{'gpu' + str(j):>5}" for j in range(n)))
        for i, row in enumerate(host.gpu_links):
            lines.append(f"  gpu{i:<4} " + " ".join(f"{c:>5}" for c in row))
    if host.rdma:
        lines.append(f"rdma      {len(host.rdma)} device(s)")
        for dev in host.rdma:
            for p in dev.ports:
                lines.append(f"  {dev.name}/{p['port']}  {p['state']}, {p['rate']}, {p['link_layer']}")
    else:
        lines.append("rdma      none (/sys/class/infiniband is absent or empty)")
    if "host_memcpy" in host.probes:
        hm = host.probes["host_memcpy"]
        lines.append(f"probe     host memcpy {hm['median_gbps']} GB/s median of {hm['repeats']} x {hm['bytes'] >> 20} MiB")
    gc = host.probes.get("gpu_copy")
    if gc:
        if gc.get("status") != "ok":
            lines.append(f"probe     GPU copies {gc['status']}")
        else:
            for d in gc["devices"]:
                lines.append(f"probe     gpu{d['index']}: H2D {d['h2d_gbps']} GB/s, D2H {d['d2h_gbps']} GB/s, "
                             f"D2D {d['d2d_gbps']} GB/s")
            for p in gc["peer"]:
                p2p = "on" if p["p2p_access"] else "off"
                lines.append(f"probe     gpu{p['src']}->gpu{p['dst']}: {p['gbps']} GB/s (p2p {p2p})")
            if gc.get("peer_status"):
                lines.append(f"probe     peer copies {gc['peer_status']}")
    return "\n".join(lines)
