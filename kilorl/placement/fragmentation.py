"""GPU fragmentation as defined by FGD (Weng et al., USENIX ATC'23).

For a target workload M (task types m with popularity p_m), the fragmentation of a node n is
``F_n(M) = sum_m p_m * F_n(m)``, in GPU shares, where ``F_n(m)`` is the free GPU share on n
that task m cannot use:

- m does not fit on n at all (CPU, memory, GPU model or GPU share): all free GPU share of n;
- m is a shared-GPU task (< 1 device): the free share of the devices with less free than m asks;
- m takes whole devices: the free share of partially used devices;
- m is CPU-only and fits: 0.

The cluster's fragmentation is the sum over nodes. ``binpack-topo`` places a task where it
*increases* that sum the least (the "fragmentation gradient").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kilorl.placement.requests import Demand
from kilorl.placement.state import ClusterState


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

    @classmethod
    def of(cls, demands: Iterable[Demand], model_names: list[str], max_types: int | None = None) -> Workload:
        """Popularity-weighted types; all of them, or the ``max_types`` most common (renormalized)."""
        counts = Counter(demands)
        if not counts:
            raise ValueError("a workload needs at least one task type")
        common = counts.most_common(max_types)
        types = [d for d, _ in common]
        weights = np.array([c for _, c in common], dtype=np.float64)
        mask = np.ones((len(types), max(1, len(model_names))), dtype=bool)
        for t, d in enumerate(types):
            if d.gpu_models is not None and d.num_gpus:
                mask[t] = [m in d.gpu_models for m in model_names] or [False]
        return cls(
            num_gpus=np.array([d.num_gpus for d in types], dtype=np.int64),
            gpu_milli=np.array([d.gpu_milli for d in types], dtype=np.int64),
            cpu_milli=np.array([d.cpu_milli for d in types], dtype=np.int64),
            mem_mib=np.array([d.mem_mib for d in types], dtype=np.int64),
            model_mask=mask,
            prob=weights / weights.sum(),
        )


def node_fragmentation(
    gpu_free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, node_model: np.ndarray, wl: Workload
) -> np.ndarray:
    """``F_n(M)`` in GPU milli for each row (node) of the given arrays."""
    free = np.clip(gpu_free, 0, None).astype(np.int64)  # [R, G]
    total = free.sum(axis=1)  # [R]
    ok = (cpu_free[:, None] >= wl.cpu_milli[None, :]) & (mem_free[:, None] >= wl.mem_mib[None, :])
    has_gpu = node_model >= 0
    model_ok = np.where(has_gpu[:, None], wl.model_mask[:, np.clip(node_model, 0, None)].T, wl.num_gpus[None, :] == 0)
    ok &= model_ok | (wl.num_gpus[None, :] == 0)
    shared = (wl.num_gpus == 1) & (wl.gpu_milli < 1000)
    # Per type: the share each device must have free, and the count of such devices needed.
    need = np.where(wl.num_gpus == 0, 0, np.where(shared, wl.gpu_milli, 1000))  # [T]
    usable = free[:, :, None] >= need[None, None, :]  # [R, G, T]
    gpu_fit = usable.sum(axis=1) >= wl.num_gpus[None, :]  # [R, T]
    stranded = (free[:, :, None] * ~usable).sum(axis=1)  # [R, T] free share on devices too small
    frag = np.where(ok & gpu_fit, np.where(wl.num_gpus[None, :] == 0, 0, stranded), total[:, None])
    return frag @ wl.prob


def cluster_fragmentation(state: ClusterState, wl: Workload) -> float:
    """Sum of ``F_n(M)`` over all nodes, in GPUs (not milli)."""
    return float(node_fragmentation(state.gpu_free, state.cpu_free, state.mem_free, state.node_model, wl).sum()) / 1000.0
