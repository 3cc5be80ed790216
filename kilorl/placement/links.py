"""Link classes between two devices, in NCCL / ``nvidia-smi topo -m`` terms.

The order is the order of distance: a pair of GPUs is as close as the *farthest*
hop its traffic takes. Bandwidth (GB/s, one direction) and latency (microseconds)
per class are defaults for a modern H100-class node; a topology YAML overrides them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class LinkClass(enum.IntEnum):
    """Distance between two GPUs; larger means farther (and slower)."""

    SELF = 0
    """The same device."""
    NVLINK = 1
    """Direct NVLink / NVSwitch (one NVLink island)."""
    PIX = 2
    """Through at most one PCIe switch."""
    PXB = 3
    """Through several PCIe switches, not the host bridge."""
    PHB = 4
    """Through a PCIe host bridge (the CPU root complex)."""
    NODE = 5
    """Across PCIe host bridges inside one NUMA node."""
    SYS = 6
    """Across NUMA nodes (the SMP interconnect, QPI/UPI/xGMI)."""
    NET = 7
    """Across machines through NICs (RDMA or TCP) and the switch fabric."""

    @property
    def label(self) -> str:
        return "NV" if self is LinkClass.NVLINK else self.name

    @classmethod
    def parse(cls, text: str) -> LinkClass:
        key = text.strip().upper()
        if key in ("NV", "NVL", "NVLINK"):
            return cls.NVLINK
        try:
            return cls[key]
        except KeyError:
            allowed = ", ".join(c.name for c in cls if c is not cls.SELF)
            raise ValueError(f"unknown link class {text!r}; allowed: {allowed}") from None


@dataclass(frozen=True)
class LinkSpec:
    """Performance of one link class."""

    bandwidth_gbps: float
    """Bandwidth in GB/s (bytes, one direction) available to one GPU over this class."""
    latency_us: float
    """One-hop latency in microseconds."""


DEFAULT_LINKS: dict[LinkClass, LinkSpec] = {
    LinkClass.SELF: LinkSpec(bandwidth_gbps=2000.0, latency_us=0.5),
    LinkClass.NVLINK: LinkSpec(bandwidth_gbps=450.0, latency_us=2.0),
    LinkClass.PIX: LinkSpec(bandwidth_gbps=25.0, latency_us=4.0),
    LinkClass.PXB: LinkSpec(bandwidth_gbps=22.0, latency_us=5.0),
    LinkClass.PHB: LinkSpec(bandwidth_gbps=20.0, latency_us=6.0),
    LinkClass.NODE: LinkSpec(bandwidth_gbps=18.0, latency_us=7.0),
    LinkClass.SYS: LinkSpec(bandwidth_gbps=12.0, latency_us=9.0),
    LinkClass.NET: LinkSpec(bandwidth_gbps=50.0, latency_us=5.0),
}
"""Defaults: NVLink 4 (H100 SXM, 450 GB/s per direction), PCIe Gen5 x16, 400 Gb/s NDR NICs."""

# NVML's nvmlGpuTopologyLevel_t values -> link class (NVLink is detected separately).
NVML_LEVEL_TO_CLASS: dict[int, LinkClass] = {
    0: LinkClass.SELF,  # NVML_TOPOLOGY_INTERNAL
    10: LinkClass.PIX,  # NVML_TOPOLOGY_SINGLE
    20: LinkClass.PXB,  # NVML_TOPOLOGY_MULTIPLE
    30: LinkClass.PHB,  # NVML_TOPOLOGY_HOSTBRIDGE
    40: LinkClass.NODE,  # NVML_TOPOLOGY_NODE
    50: LinkClass.SYS,  # NVML_TOPOLOGY_SYSTEM
}
