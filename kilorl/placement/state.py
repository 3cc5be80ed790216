"""What is in use: free GPU shares, CPU and memory per node, as numpy arrays.

Kept as arrays so a policy scores every node of a 1,000-node cluster in one vector
operation. GPU shares are integer milli (1000 = a whole device), -1 marks a slot a
node does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kilorl.placement.requests import Demand
from kilorl.placement.topology import Topology

ABSENT = -1


@dataclass(frozen=True)
class Allocation:
    """One placed instance."""

    role: str
    instance: int
    node: int
    """Index into ``topology.nodes``."""
    gpus: tuple[int, ...]
    """Device indices on the node."""
    gpu_milli: int
    """Share taken on each of ``gpus``."""
    cpu_milli: int
    mem_mib: int


class CapacityState:
    """Free resources of every node of a topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        n, g = len(topology.nodes), max(1, topology.max_gpus_per_node)
        self.gpu_free = np.full((n, g), ABSENT, dtype=np.int32)
        self.island = np.full((n, g), ABSENT, dtype=np.int32)
        models = sorted({gpu.model for node in topology.nodes for gpu in node.gpus})
        self.model_names = models
        self.node_model = np.full(n, -1, dtype=np.int32)
        for i, node in enumerate(topology.nodes):
            for gpu in node.gpus:
                self.gpu_free[i, gpu.index] = 1000
                self.island[i, gpu.index] = gpu.island
            if node.gpus:
                self.node_model[i] = models.index(node.gpus[0].model)
        self.cpu_free = np.array([round(nd.cpus * 1000) for nd in topology.nodes], dtype=np.int64)
        self.mem_free = np.array([round(nd.memory_gb * 1024) for nd in topology.nodes], dtype=np.int64)
        leaves = {name: k for k, name in enumerate(topology.leaves)}
        self.leaf = np.array([leaves[nd.leaf] for nd in topology.nodes], dtype=np.int32)
        domains = {name: k for k, name in enumerate(dict.fromkeys(nd.failure_domain for nd in topology.nodes))}
        self.domain = np.array([domains[nd.failure_domain] for nd in topology.nodes], dtype=np.int32)
        self.gpu_capacity_milli = int((self.gpu_free > 0).sum()) * 1000
        self.gpu_total = np.clip(self.gpu_free, 0, None).sum(axis=1).astype(np.int64)
        """Free GPU share per node (milli), kept in step with ``gpu_free``."""

    def copy(self) -> CapacityState:
        new = object.__new__(CapacityState)
        new.__dict__.update(self.__dict__)
        for name in ("gpu_free", "gpu_total", "cpu_free", "mem_free"):
            setattr(new, name, getattr(self, name).copy())
        return new

    # ---- bookkeeping -------------------------------------------------------------
    def allocate(self, a: Allocation) -> None:
        row = self.gpu_free[a.node]
        for g in a.gpus:
            if row[g] < a.gpu_milli:
                raise ValueError(f"node {a.node} gpu {g}: {row[g]} milli free < {a.gpu_milli}")
        if self.cpu_free[a.node] < a.cpu_milli or self.mem_free[a.node] < a.mem_mib:
            raise ValueError(f"node {a.node}: not enough CPU or memory for {a}")
        for g in a.gpus:
            row[g] -= a.gpu_milli
        self.gpu_total[a.node] -= a.gpu_milli * len(a.gpus)
        self.cpu_free[a.node] -= a.cpu_milli
        self.mem_free[a.node] -= a.mem_mib

    def release(self, a: Allocation) -> None:
        for g in a.gpus:
            self.gpu_free[a.node, g] += a.gpu_milli
        self.gpu_total[a.node] += a.gpu_milli * len(a.gpus)
        self.cpu_free[a.node] += a.cpu_milli
        self.mem_free[a.node] += a.mem_mib

    # ---- queries -----------------------------------------------------------------
    @property
    def allocated_gpu_milli(self) -> int:
        return self.gpu_capacity_milli - int(self.gpu_total.sum())

    @property
    def allocation_rate(self) -> float:
        """Fraction of all GPU capacity (in shares) that is allocated."""
        return self.allocated_gpu_milli / self.gpu_capacity_milli if self.gpu_capacity_milli else 0.0

    def model_ok(self, demand: Demand) -> np.ndarray:
        if demand.gpu_models is None or demand.num_gpus == 0:
            return np.ones(len(self.cpu_free), dtype=bool)
        allowed = [k for k, m in enumerate(self.model_names) if m in demand.gpu_models]
        return np.isin(self.node_model, allowed)

    def fits(self, demand: Demand) -> np.ndarray:
        """Boolean per node: one instance of ``demand`` fits there now."""
        ok = (self.cpu_free >= demand.cpu_milli) & (self.mem_free >= demand.mem_mib) & self.model_ok(demand)
        if demand.num_gpus == 0:
            return ok
        if demand.shared:
            return ok & (self.gpu_free >= demand.gpu_milli).any(axis=1)
        return ok & ((self.gpu_free == 1000).sum(axis=1) >= demand.num_gpus)

    def fits_on(self, node: int, demand: Demand) -> bool:
        """``fits(demand)[node]`` without scoring every node."""
        if self.cpu_free[node] < demand.cpu_milli or self.mem_free[node] < demand.mem_mib:
            return False
        if demand.num_gpus == 0:
            return True
        if demand.gpu_models is not None and (self.node_model[node] < 0
                                              or self.model_names[self.node_model[node]] not in demand.gpu_models):
            return False
        row = self.gpu_free[node]
        if demand.shared:
            return bool((row >= demand.gpu_milli).any())
        return int((row == 1000).sum()) >= demand.num_gpus

    def capacity(self, demand: Demand, gpu_mask: np.ndarray | None = None) -> np.ndarray:
        """Instances of ``demand`` each node can still take (optionally on a subset of GPUs)."""
        big = np.iinfo(np.int64).max // 4
        free = self.gpu_free if gpu_mask is None else np.where(gpu_mask, self.gpu_free, ABSENT)
        cpu = self.cpu_free // demand.cpu_milli if demand.cpu_milli else np.full(len(self.cpu_free), big)
        mem = self.mem_free // demand.mem_mib if demand.mem_mib else np.full(len(self.cpu_free), big)
        cap = np.minimum(cpu, mem)
        if demand.num_gpus:
            if demand.shared:
                gcap = (np.clip(free, 0, None) // demand.gpu_milli).sum(axis=1)
            else:
                gcap = (free == 1000).sum(axis=1) // demand.num_gpus
            cap = np.minimum(cap, gcap)
        return np.where(self.model_ok(demand), cap, 0)

    def choose_gpus(self, node: int, demand: Demand, how: str = "best", gpu_mask: np.ndarray | None = None) -> tuple[int, ...]:
        """Devices on ``node`` for one instance.

        ``how``: ``first`` (lowest index), ``best`` (tightest share / fullest island, keeps
        whole devices and islands free), ``worst`` (most free share, spreads load).
        ``gpu_mask`` restricts the choice to some devices (one island).
        """
        if demand.num_gpus == 0:
            return ()
        row = self.gpu_free[node] if gpu_mask is None else np.where(gpu_mask, self.gpu_free[node], ABSENT)
        if demand.shared:
            cand = np.flatnonzero(row >= demand.gpu_milli)
            if len(cand) == 0:
                raise ValueError(f"node {node}: no device with {demand.gpu_milli} milli free")
            if how == "first":
                return (int(cand[0]),)
            key = row[cand] if how == "best" else -row[cand]
            return (int(cand[np.argmin(key)]),)
        full = np.flatnonzero(row == 1000)
        if len(full) < demand.num_gpus:
            raise ValueError(f"node {node}: {len(full)} whole devices free < {demand.num_gpus}")
        if how != "best":
            return tuple(int(x) for x in full[: demand.num_gpus])
        # Island-aware: fill the island with the fewest free devices that holds them all,
        # else take from the largest free islands first (fewest islands spanned).
        by_island: dict[int, list[int]] = {}
        for g in full:
            by_island.setdefault(int(self.island[node, g]), []).append(int(g))
        fitting = [v for v in by_island.values() if len(v) >= demand.num_gpus]
        if fitting:
            return tuple(min(fitting, key=len)[: demand.num_gpus])
        picked: list[int] = []
        for members in sorted(by_island.values(), key=len, reverse=True):
            picked.extend(members[: demand.num_gpus - len(picked)])
            if len(picked) == demand.num_gpus:
                break
        return tuple(sorted(picked))
