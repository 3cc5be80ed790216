"""GPU fragmentation as defined by FGD (Weng et al., USENIX ATC'23).

For a target workload M (task types m with popularity p_m), the fragmentation of a node n is
``F_n(M) = sum_m p_m * F_n(m)``, in GPU milli, where ``F_n(m)`` is the free GPU share on n
that task m cannot use:

- m does not fit on n at all (CPU, GPU model, GPU share; memory too unless the measure
  ignores it): all free GPU share of n;
- m is a shared-GPU task (< 1 device): the free share of the devices with less free than m asks;
- m takes whole devices: the free share of partially used devices;
- m is CPU-only: all free GPU share of n in the paper's measure (a CPU task uses no GPU),
  0 if it fits in the ``strand`` measure (which only charges GPUs stranded by a lack of CPU).

The cluster's fragmentation is the sum over nodes. ``fgd`` and ``binpack-topo`` place a task
where it *increases* that sum the least (the "fragmentation gradient").

Computed by thresholds: a task type needs devices with at least ``need`` milli free, and the
trace has few distinct ``need`` values (about 20), so the per-device work is ``[rows, devices,
thresholds]`` and only the CPU/memory test is per type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from kilorl.placement.requests import Demand
from kilorl.placement.state import CapacityState
from kilorl.placement.topology import Topology

MEASURES: tuple[str, ...] = ("paper", "strand")
"""``paper``: the FGD artifact's measure (CPU and GPU only; CPU-only tasks see every free GPU
as a fragment). ``strand``: memory counts too, CPU-only tasks that fit add nothing."""


@dataclass(frozen=True)
class Workload:
    """Task types (as arrays) and their popularity; built with ``Workload.of``."""

    num_gpus: np.ndarray
    gpu_milli: np.ndarray
    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    model_mask: np.ndarray
    """[types, models] bool: which GPU models a type accepts."""
    prob: np.ndarray
    thresholds: np.ndarray
    """Distinct free share (milli) a device must have for some GPU type to use it."""
    threshold_of: np.ndarray
    """Per type: index into ``thresholds`` (-1 for CPU-only types)."""
    cpu_per_gpu: float
    """CPU milli the workload asks per GPU milli (all tasks, CPU-only ones included; inf without GPUs)."""
    mem_per_gpu: float
    """Memory MiB the workload asks per GPU milli."""

    @classmethod
    def of(cls, demands: Iterable[Demand], model_names: list[str], max_types: int | None = None) -> Workload:
        """Popularity-weighted types; all of them, or the ``max_types`` most common (renormalized)."""
        return cls.from_counts(Counter(demands).most_common(max_types), model_names)

    @classmethod
    def typical(cls, demands: Iterable[Demand], model_names: list[str], share: float = 0.95) -> Workload:
        """The FGD artifact's estimate ("typical pods"): task types keyed on (CPU, GPU share, GPU
        count, GPU models), memory left out, the most common first until they cover ``share`` of
        the pods by count, renormalized. Ties in count go by the type itself (the artifact's
        order among equal counts is a map's)."""
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1] (got {share})")
        counts = Counter(Demand(d.num_gpus, d.gpu_milli, d.cpu_milli, 0, d.gpu_models) for d in demands)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].num_gpus, kv[0].gpu_milli, kv[0].cpu_milli,
                                                        sorted(kv[0].gpu_models or ())))
        total, cum, kept = sum(counts.values()), 0, []
        for d, c in ranked:
            if cum >= share * total:
                break
            kept.append((d, c))
            cum += c
        return cls.from_counts(kept, model_names)

    @classmethod
    def from_counts(cls, common: list[tuple[Demand, int]], model_names: list[str]) -> Workload:
        """Types with their counts (popularity = count / sum of counts)."""
        if not common:
            raise ValueError("a workload needs at least one task type")
        types = [d for d, _ in common]
        weights = np.array([c for _, c in common], dtype=np.float64)
        mask = np.ones((len(types), max(1, len(model_names))), dtype=bool)
        for t, d in enumerate(types):
            if d.gpu_models is not None and d.num_gpus:
                mask[t] = [m in d.gpu_models for m in model_names] or [False]
        num_gpus = np.array([d.num_gpus for d in types], dtype=np.int64)
        need = np.array([0 if d.num_gpus == 0 else (d.gpu_milli if d.shared else 1000) for d in types], dtype=np.int64)
        thresholds = np.unique(need[num_gpus > 0])
        gpu = sum(c * d.total_gpu_milli for d, c in common)

        def per_gpu(x: float) -> float:
            return x / gpu if gpu else float("inf")

        return cls(
            num_gpus=num_gpus,
            gpu_milli=np.array([d.gpu_milli for d in types], dtype=np.int64),
            cpu_milli=np.array([d.cpu_milli for d in types], dtype=np.int64),
            mem_mib=np.array([d.mem_mib for d in types], dtype=np.int64),
            model_mask=mask,
            prob=weights / weights.sum(),
            thresholds=thresholds,
            threshold_of=np.where(num_gpus > 0, np.searchsorted(thresholds, need), -1),
            cpu_per_gpu=per_gpu(sum(c * d.cpu_milli for d, c in common)),
            mem_per_gpu=per_gpu(sum(c * d.mem_mib for d, c in common)),
        )


    def reweighted(self, factor: np.ndarray) -> Workload:
        """The same types with each popularity multiplied by ``factor`` (not renormalized)."""
        return replace(self, prob=self.prob * factor)


RARE_HOSTS = 0.1
"""A GPU task type that fits, on the empty cluster, on fewer than this share of the GPU nodes has rare hosts."""


def host_weights(wl: Workload, topology: Topology) -> np.ndarray:
    """Per type: (GPU nodes) / (nodes that can host it when empty) for types with rare hosts, else 1.

    Why: ``F_n(m)`` is local to a node, so FGD charges breaking a node for type m by m's
    popularity alone, as if m could go anywhere. A type that only a few nodes can ever host
    (an 8-GPU pod asking 120 cores and 640 GB: 39 of 1,213 nodes) loses a large share of its
    capacity with each such node broken, so its popularity is counted per eligible node.
    Types that most nodes can host keep their weight (counting them per node as well
    changes the placement of common multi-GPU pods for the worse).
    """
    empty = CapacityState(topology)
    gpu_nodes = empty.node_model >= 0
    n = max(1, int(gpu_nodes.sum()))
    model = np.clip(empty.node_model, 0, None)
    out = np.ones(len(wl.prob))
    for t in np.flatnonzero(wl.num_gpus > 0):
        d = Demand(int(wl.num_gpus[t]), int(wl.gpu_milli[t]), int(wl.cpu_milli[t]), int(wl.mem_mib[t]))
        hosts = int((empty.fits(d) & wl.model_mask[t][model] & gpu_nodes).sum())
        if 0 < hosts < RARE_HOSTS * n:
            out[t] = n / hosts
    return out


def node_fragmentation(
    gpu_free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, node_model: np.ndarray, wl: Workload,
    measure: str = "paper",
) -> np.ndarray:
    """``F_n(M)`` in GPU milli for each row (node) of the given arrays."""
    free = np.maximum(gpu_free, 0).astype(np.int64)  # [R, G]
    total = free.sum(axis=1)  # [R]
    out = np.zeros(len(free))
    gpu_t = wl.num_gpus > 0
    if gpu_t.any():
        thr = wl.thresholds
        usable = free[:, :, None] >= thr[None, None, :]  # [R, G, S]
        count = usable.sum(axis=1)  # [R, S] devices a type of threshold s can use
        stranded = (free[:, :, None] * ~usable).sum(axis=1)  # [R, S] free share on devices too small
        s = wl.threshold_of[gpu_t]
        ok = (count[:, s] >= wl.num_gpus[gpu_t][None, :]) & (cpu_free[:, None] >= wl.cpu_milli[gpu_t][None, :])
        if measure == "strand":
            ok &= mem_free[:, None] >= wl.mem_mib[gpu_t][None, :]
        ok &= wl.model_mask[gpu_t][:, np.clip(node_model, 0, None)].T
        out += np.where(ok, stranded[:, s], total[:, None]) @ wl.prob[gpu_t]
    cpu_t = ~gpu_t
    if cpu_t.any():
        if measure == "paper":
            out += total * wl.prob[cpu_t].sum()
        else:
            fits = (cpu_free[:, None] >= wl.cpu_milli[cpu_t][None, :]) & (mem_free[:, None] >= wl.mem_mib[cpu_t][None, :])
            out += np.where(fits, 0, total[:, None]) @ wl.prob[cpu_t]
    return out


def ratio_stranding(gpu_total: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, wl: Workload) -> np.ndarray:
    """GPU milli per node that the workload, at its average CPU and memory per GPU, cannot reach.

    A fluid view of the same loss ``F_n(M)`` counts only once it happens: a node whose free
    CPU (or memory) is short of what its free GPUs will draw at the workload's ratio strands
    the difference. ``binpack-topo`` descends the sum of both, so it keeps CPU-rich nodes for
    CPU-heavy tasks before the CPU runs out rather than after.
    """
    out = np.zeros(len(gpu_total))
    for free, per_gpu in ((cpu_free, wl.cpu_per_gpu), (mem_free, wl.mem_per_gpu)):
        if 0 < per_gpu < float("inf"):  # a resource the workload does not ask for never strands a GPU
            out += np.maximum(0.0, gpu_total - free / per_gpu)
    return out


def total_fragmentation(state: CapacityState, wl: Workload, measure: str = "paper") -> float:
    """Sum of ``F_n(M)`` over all nodes, in GPUs (not milli)."""
    f = node_fragmentation(state.gpu_free, state.cpu_free, state.mem_free, state.node_model, wl, measure)
    return float(f.sum()) / 1000.0


RARE = 0.05
"""``leftover_gpus``: a node where fewer than this share of the workload's tasks fit is 'rare'."""


def leftover_gpus(state: CapacityState, wl: Workload) -> dict[str, float]:
    """Where the free GPU share sits, by how much of the workload can still use it (GPUs).

    Per node: the share ``p_fit`` of the workload's GPU tasks (by count) that fit there now
    (CPU-only tasks do not count: they cannot use a free GPU).
    ``no_task_fits`` (of which ``cpu_or_memory_short``: some task would fit by GPU alone),
    ``only_rare_tasks_fit`` (0 < p_fit < ``RARE``), ``common_tasks_fit``.
    """
    n = len(state.cpu_free)
    p_fit, gpu_fit = np.zeros(n), np.zeros(n, dtype=bool)
    gpu_types = np.flatnonzero(wl.num_gpus > 0)
    weight = wl.prob[gpu_types] / max(wl.prob[gpu_types].sum(), 1e-12)
    model = np.clip(state.node_model, 0, None)
    for t, w in zip(gpu_types, weight, strict=True):
        d = Demand(int(wl.num_gpus[t]), int(wl.gpu_milli[t]), int(wl.cpu_milli[t]), int(wl.mem_mib[t]))
        on_model = wl.model_mask[t][model] & (state.node_model >= 0)
        p_fit += w * (state.fits(d) & on_model)
        gpu_fit |= state.fits(Demand(d.num_gpus, d.gpu_milli, 0, 0)) & on_model
    free = state.gpu_total / 1000.0
    none = p_fit <= 1e-12
    return {
        "free": round(float(free.sum()), 2),
        "no_task_fits": round(float(free[none].sum()), 2),
        "cpu_or_memory_short": round(float(free[none & gpu_fit].sum()), 2),
        "only_rare_tasks_fit": round(float(free[~none & (p_fit < RARE)].sum()), 2),
        "common_tasks_fit": round(float(free[p_fit >= RARE].sum()), 2),
    }


def sliver_floor(placed: dict[Demand, int]) -> float:
    """GPUs that must stay idle given the placed pods, from slivers only smaller tasks can fill.

    A device holds at most one shared pod of s > 500 milli, and keeps its room 1000 - s free
    unless pods of at most that room join it. So for any room size r, the devices whose big
    pod leaves a room <= r keep at least (the sum of their rooms) - (the share of all placed
    shared pods <= r milli) idle. The largest of these bounds over r, in GPUs. Pods are
    counted by share (pods of one share with other CPU or memory asks add up).
    """
    by_share: Counter[int] = Counter()
    for d, n in placed.items():
        if d.shared:
            by_share[d.gpu_milli] += n
    rooms = sorted({1000 - s for s in by_share if s > 500})
    best = 0.0
    for r in rooms:
        idle = sum(n * (1000 - s) for s, n in by_share.items() if s > 500 and 1000 - s <= r)
        fill = sum(n * s for s, n in by_share.items() if s <= r)
        best = max(best, (idle - fill) / 1000.0)
    return best
