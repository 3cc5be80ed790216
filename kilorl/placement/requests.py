"""What a role asks for: per-instance demand, gang size and affinities."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

AffinityKind = Literal["same_island", "same_leaf", "near_role", "spread"]
AFFINITY_KINDS: tuple[str, ...] = ("same_island", "same_leaf", "near_role", "spread")


@dataclass(frozen=True)
class Demand:
    """Resources of one instance in integer units (GPU milli, CPU milli, MiB)."""

    num_gpus: int
    """Devices touched: 0 (CPU only), 1 (whole or shared), k > 1 (k whole devices)."""
    gpu_milli: int
    """Share of each device in 1/1000 (1000 = whole); < 1000 only with num_gpus == 1."""
    cpu_milli: int
    mem_mib: int
    gpu_models: frozenset[str] | None = None
    """Allowed GPU models (None: any)."""

    def __post_init__(self) -> None:
        if self.num_gpus < 0 or self.cpu_milli < 0 or self.mem_mib < 0:
            raise ValueError(f"negative demand: {self}")
        if self.num_gpus and not 0 < self.gpu_milli <= 1000:
            raise ValueError(f"gpu_milli must be in 1..1000 when num_gpus > 0 (got {self.gpu_milli})")
        if self.num_gpus > 1 and self.gpu_milli != 1000:
            raise ValueError("a multi-GPU instance takes whole devices (gpu_milli 1000)")

    @property
    def shared(self) -> bool:
        return self.num_gpus == 1 and self.gpu_milli < 1000

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpus * self.gpu_milli

    @classmethod
    def of(cls, gpus: float, cpus: float, memory_gb: float, gpu_models: frozenset[str] | None = None) -> Demand:
        """From user units: ``gpus`` may be a fraction below 1 or a whole number."""
        if gpus < 0:
            raise ValueError(f"gpus must be >= 0 (got {gpus})")
        if 0 < gpus < 1:
            return cls(1, max(1, round(gpus * 1000)), round(cpus * 1000), math.ceil(memory_gb * 1024), gpu_models)
        if gpus != int(gpus):
            raise ValueError(f"gpus above 1 must be a whole number (got {gpus})")
        n = int(gpus)
        return cls(n, 1000 if n else 0, round(cpus * 1000), math.ceil(memory_gb * 1024), gpu_models)


@dataclass(frozen=True)
class Affinity:
    """A placement wish for a whole gang.

    ``same_island``: all instances inside one NVLink island; ``same_leaf``: under one leaf
    switch; ``near_role``: on the leaf switches where ``role`` already runs (same node
    preferred); ``spread``: each instance in a different failure domain. A required
    affinity that cannot be met fails the placement; a preferred one guides
    ``binpack-topo`` only.
    """

    kind: AffinityKind
    role: str | None = None
    required: bool = False

    def __post_init__(self) -> None:
        if self.kind not in AFFINITY_KINDS:
            raise ValueError(f"affinity kind {self.kind!r}; allowed: {', '.join(AFFINITY_KINDS)}")
        if (self.kind == "near_role") != (self.role is not None):
            raise ValueError("near_role needs role=..., other kinds take no role")


@dataclass(frozen=True)
class GangRequest:
    """``count`` identical instances of one role, placed all together or not at all."""

    role: str
    count: int
    demand: Demand
    affinities: tuple[Affinity, ...] = field(default_factory=tuple)
    collective: bool = False
    """The instances all-reduce with each other (the learner group): scored for it."""
    only_nodes: frozenset[str] | None = None
    """Names of the nodes the instances may use (None: any), e.g. those with the labels a
    role asks for."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"{self.role}: count must be >= 1 (got {self.count})")

    def affinity(self, kind: str) -> Affinity | None:
        return next((a for a in self.affinities if a.kind == kind), None)
