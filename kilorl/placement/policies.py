"""Where one instance goes: the node-choice rule of each policy.

- ``first-fit``: the lowest-indexed node that fits, lowest-indexed devices.
- ``spread``: the node with the most free GPU share (Kubernetes LeastAllocated-like).
- ``pack``: Ray PACK-like: nodes the gang already uses first, then the most allocated node.
- ``fgd``: FGD as published (Weng et al., ATC'23): the node and device where the
  cluster's fragmentation (paper measure) grows least; ties to the lowest index.
- ``binpack-topo`` (ours): the node whose fragmentation (``strand`` measure, types with
  rare hosts counted per eligible node) plus ratio stranding grows least, then the
  tightest fit; devices chosen island-aware. Its gang-level topology step (one island, one
  node, one leaf) lives in ``scheduler``.
"""

from __future__ import annotations

import numpy as np

from kilorl.placement.fragmentation import Workload, ratio_stranding
from kilorl.placement.requests import Demand
from kilorl.placement.scoring import FragScorer
from kilorl.placement.state import CapacityState

POLICIES: tuple[str, ...] = ("binpack-topo", "fgd", "first-fit", "spread", "pack")
GPU_CHOICE = {"binpack-topo": "best", "fgd": "best", "first-fit": "first", "spread": "worst", "pack": "best"}
MEASURE = {"binpack-topo": "strand", "fgd": "paper"}
"""The fragmentation measure each gradient policy descends (``fragmentation.MEASURES``)."""


def check_policy(name: str) -> str:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}")
    return name


def scorer_for(policy: str, workload: Workload) -> FragScorer | None:
    """The fragmentation scorer a policy needs (None for those that ignore fragmentation)."""
    if policy not in MEASURE:
        return None
    if policy == "binpack-topo":
        return FragScorer(by_gpu_share(workload), MEASURE[policy], rare_hosts=True)
    return FragScorer(workload, MEASURE[policy])


def by_gpu_share(wl: Workload) -> Workload:
    """The same types, each weighted by the GPU share it brings (count x GPUs asked) instead of its count.

    Why: allocation is counted in GPU share, so losing room for a type costs in proportion to
    the share that type asks. By count, an 8-GPU pod weighs as much as a 0.1-GPU one, and
    breaking the whole nodes 8-GPU pods need looks cheap. CPU-only types weigh 0: in the
    ``strand`` measure they matter only where they no longer fit, which idles no GPU.
    """
    w = (wl.num_gpus * wl.gpu_milli).astype(np.float64)
    total = float((wl.prob * w).sum())
    return wl if total <= 0 else wl.reweighted(w / total)


def pick_gpus(policy: str, state: CapacityState, node: int, demand: Demand, device: int = -1,
              gpu_mask: np.ndarray | None = None) -> tuple[int, ...]:
    """Devices for one instance on ``node``: the scorer's device when it chose one, else the policy's rule."""
    if device >= 0 and gpu_mask is None:
        return (device,)
    return state.choose_gpus(node, demand, GPU_CHOICE[policy], gpu_mask=gpu_mask)


def choose_node(
    policy: str,
    state: CapacityState,
    demand: Demand,
    mask: np.ndarray,
    *,
    used: np.ndarray | None = None,
    preferred: np.ndarray | None = None,
    cache: FragScorer | None = None,
    balance: np.ndarray | None = None,
) -> tuple[int, int]:
    """(node, device) for one instance among ``mask & fits``; node -1 if none fits, device -1
    when the policy leaves the device to ``pick_gpus``.

    ``used``: nodes this gang already occupies; ``preferred``: nodes a soft affinity
    favours (only ``binpack-topo`` and ``pack`` look at them); ``balance``: instances of this
    gang per node, which ``binpack-topo`` evens out among preferred nodes (parameter servers
    shared across the learner nodes rather than stacked on one).
    """
    idx = np.flatnonzero(mask & state.fits(demand))
    if len(idx) == 0:
        return -1, -1
    if policy == "first-fit":
        return int(idx[0]), -1
    gfree = state.gpu_total[idx]
    cfree = state.cpu_free[idx]
    if policy == "spread":
        # Most free GPU share first (CPU-only: most free CPU), lowest index on ties.
        keys = (-cfree, -gfree) if demand.num_gpus else (-gfree, -cfree)
        return int(idx[np.lexsort(keys)[0]]), -1
    in_used = used[idx] if used is not None else np.zeros(len(idx), dtype=bool)
    in_pref = preferred[idx] if preferred is not None else np.zeros(len(idx), dtype=bool)
    if policy == "pack":
        primary = gfree if demand.num_gpus else cfree
        return int(idx[np.lexsort((cfree, primary, ~in_pref, ~in_used))[0]]), -1
    if cache is None:
        delta, device = np.zeros(len(idx)), np.full(len(idx), -1)
    else:
        delta, device = cache.gradient(state, demand, idx)
    if policy == "fgd":
        k = int(np.argmin(delta))
        return int(idx[k]), int(device[k])
    if policy == "binpack-topo":
        after_g = gfree - demand.total_gpu_milli
        if cache is not None:
            mem = state.mem_free[idx]
            wl = cache.workload
            grow = (ratio_stranding(after_g, cfree - demand.cpu_milli, mem - demand.mem_mib, wl)
                    - ratio_stranding(gfree, cfree, mem, wl))
            delta = np.round(delta + grow, 3)
        if balance is not None:
            k = np.lexsort((cfree, after_g, delta, balance[idx], ~in_pref))[0]
        else:
            k = np.lexsort((cfree, after_g, delta, ~in_used, ~in_pref))[0]
        return int(idx[k]), -1
    raise ValueError(f"unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
