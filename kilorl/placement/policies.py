"""Where one instance goes: the node-choice rule of each policy.

- ``first-fit``: the lowest-indexed node that fits, lowest-indexed devices.
- ``spread``: the node with the most free GPU share (Kubernetes LeastAllocated-like).
- ``pack``: Ray PACK-like: nodes the gang already uses first, then the most allocated node.
- ``binpack-topo`` (ours): the node whose FGD fragmentation grows least (see
  ``fragmentation``), then the tightest fit; devices chosen island-aware. Its gang-level
  topology step (one island, one node, one leaf) lives in ``scheduler``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kilorl.placement.fragmentation import Workload, node_fragmentation
from kilorl.placement.requests import Demand
from kilorl.placement.state import ClusterState

POLICIES: tuple[str, ...] = ("binpack-topo", "first-fit", "spread", "pack")
GPU_CHOICE = {"binpack-topo": "best", "first-fit": "first", "spread": "worst", "pack": "best"}


def check_policy(name: str) -> str:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}")
    return name


@dataclass
class FragCache:
    """Current ``F_n(M)`` of every node, refreshed only for nodes that change."""

    workload: Workload
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def refresh(self, state: ClusterState, nodes: np.ndarray | list[int] | None = None) -> None:
        if nodes is None or len(self.values) != len(state.cpu_free):
            self.values = node_fragmentation(state.gpu_free, state.cpu_free, state.mem_free, state.node_model, self.workload)
            return
        idx = np.asarray(nodes, dtype=np.int64)
        self.values[idx] = node_fragmentation(
            state.gpu_free[idx], state.cpu_free[idx], state.mem_free[idx], state.node_model[idx], self.workload
        )


def _after(state: ClusterState, demand: Demand, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free arrays of nodes ``idx`` as if one instance were placed on each (best-fit devices)."""
    free = state.gpu_free[idx].copy()
    if demand.num_gpus:
        rows = np.arange(len(idx))
        if demand.shared:
            masked = np.where(free >= demand.gpu_milli, free, np.iinfo(np.int32).max)
            free[rows, masked.argmin(axis=1)] -= demand.gpu_milli
        else:
            full = free == 1000
            take = full & (np.cumsum(full, axis=1) <= demand.num_gpus)
            free[take] = 0
    return free, state.cpu_free[idx] - demand.cpu_milli, state.mem_free[idx] - demand.mem_mib


def frag_delta(state: ClusterState, demand: Demand, idx: np.ndarray, cache: FragCache) -> np.ndarray:
    """Growth of ``F_n(M)`` if one instance goes to each node in ``idx``.

    Identical candidate rows (many empty nodes of one model) are scored once.
    """
    free, cpu, mem = _after(state, demand, idx)
    model = state.node_model[idx]
    if len(idx) <= 256:
        return node_fragmentation(free, cpu, mem, model, cache.workload) - cache.values[idx]
    key = np.concatenate([free, cpu[:, None], mem[:, None], model[:, None]], axis=1)
    uniq, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    after = node_fragmentation(free[first], cpu[first], mem[first], model[first], cache.workload)[inverse.reshape(-1)]
    return after - cache.values[idx]


def choose_node(
    policy: str,
    state: ClusterState,
    demand: Demand,
    mask: np.ndarray,
    *,
    used: np.ndarray | None = None,
    preferred: np.ndarray | None = None,
    cache: FragCache | None = None,
    balance: np.ndarray | None = None,
) -> int:
    """Index of the node for one instance among ``mask & fits``, or -1 if none fits.

    ``used``: nodes this gang already occupies; ``preferred``: nodes a soft affinity
    favours (only ``binpack-topo`` and ``pack`` look at them); ``balance``: instances of this
    gang per node, which ``binpack-topo`` evens out among preferred nodes (parameter servers
    shared across the learner nodes rather than stacked on one).
    """
    idx = np.flatnonzero(mask & state.fits(demand))
    if len(idx) == 0:
        return -1
    if policy == "first-fit":
        return int(idx[0])
    gfree = np.clip(state.gpu_free[idx], 0, None).sum(axis=1)
    cfree = state.cpu_free[idx]
    if policy == "spread":
        # Most free GPU share first (CPU-only: most free CPU), lowest index on ties.
        keys = (-cfree, -gfree) if demand.num_gpus else (-gfree, -cfree)
        return int(idx[np.lexsort(keys)[0]])
    in_used = used[idx] if used is not None else np.zeros(len(idx), dtype=bool)
    in_pref = preferred[idx] if preferred is not None else np.zeros(len(idx), dtype=bool)
    if policy == "pack":
        primary = gfree if demand.num_gpus else cfree
        return int(idx[np.lexsort((cfree, primary, ~in_pref, ~in_used))[0]])
    if policy == "binpack-topo":
        delta = frag_delta(state, demand, idx, cache) if cache is not None else np.zeros(len(idx))
        # Round away float noise so ties fall through to the tighter fit.
        delta = np.round(delta, 6)
        after_g = gfree - demand.total_gpu_milli
        if balance is not None:
            return int(idx[np.lexsort((cfree, after_g, delta, balance[idx], ~in_pref))[0]])
        return int(idx[np.lexsort((cfree, after_g, delta, ~in_used, ~in_pref))[0]])
    raise ValueError(f"unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
