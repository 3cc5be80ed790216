"""The FGD paper's baselines, scored the way its authors' simulator scores them.

Weng et al., "Beware of Fragmentation" (USENIX ATC'23) compare six policies in their
Kubernetes scheduler simulator (``hkust-adsl/kubernetes-scheduler-simulator``, commit 8f3d641).
Each is one score plugin: an integer score in 0..100 per feasible node, the highest wins.
What decides the many ties is the simulator's tie rule: the node with the smallest name,
and every node name carries a prefix drawn from a seeded random permutation, so ties go to
a random node that stays the same for the whole run (``tie_rank``). Written here from the
paper and that code's documented behaviour (no code copied):

- ``random``: a random feasible node; a sharing pod gets a random device that fits.
- ``dotprod`` (Tetris-like, as configured there: GPU share merged into one dimension,
  normalised by the largest node, 128 cores and 8 GPUs): ``int(100 * (1 - (free . ask) / 2))``,
  so the node whose free CPU and GPU line up least with the ask.
- ``gpu-clustering``: nodes that already run pods of the same GPU kind (sharing, 1-GPU,
  2-GPU, ...) first, then empty nodes, then nodes with other kinds; within a class the fuller
  node (by free GPU share).
- ``gpu-packing``: a sharing pod on a partly used device first (the fuller device the better),
  then whole free devices on a used node, then an empty node.
- ``bestfit``: the least free CPU and GPU left after placing (weights 0.5 / 0.5, normalised by
  128 cores and 8 GPUs), scores min-max rescaled to 0..100 over the feasible nodes.
- ``fgd-paper``: FGD with the artifact's details: ``int(100 * sigmoid(-growth / 1000))`` of the
  growth of the node's fragmentation (paper measure) for the workload estimated by
  ``Workload.typical`` (top 95% of the list's pod specs, memory left out); a sharing pod takes
  the lowest-index device among those with the node's best quantised score.

All but ``random`` and ``fgd-paper`` give a sharing pod the tightest device that fits
(lowest index among equals); whole-GPU pods take the lowest-index free devices.
"""

from __future__ import annotations

import numpy as np

from kilorl.placement.fragmentation import Workload
from kilorl.placement.requests import Demand
from kilorl.placement.scoring import FragScorer, paper_score
from kilorl.placement.state import CapacityState

PAPER_POLICIES: tuple[str, ...] = ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd-paper")
PUBLISHED_NAMES = {"random": "01-Random", "dotprod": "02-DotProd", "gpu-clustering": "03-GpuClustering",
                   "gpu-packing": "04-GpuPacking", "bestfit": "05-BestFit", "fgd-paper": "06-FGD"}
"""Our name of each baseline -> its ``sc_policy`` in the published curves."""
MAX_CPU, MAX_GPU = 128_000, 8_000
"""The artifact's normalisers: the largest node's CPU (milli) and GPU (milli)."""


def tie_rank(n: int, seed: int) -> np.ndarray:
    """Per node its place in the tie order (lower wins): a seeded random permutation."""
    return np.random.default_rng([seed, 1]).permutation(n)


def _kind(d: Demand) -> int:
    """GPU kind of a pod for ``gpu-clustering``: 0 sharing, k for k whole GPUs (-1: CPU only)."""
    if d.num_gpus == 0:
        return -1
    return 0 if d.shared else d.num_gpus


class PaperChooser:
    """Node and devices for one pod under one of ``PAPER_POLICIES``."""

    def __init__(self, state: CapacityState, policy: str, workload: Workload, seed: int) -> None:
        if policy not in PAPER_POLICIES:
            raise ValueError(f"unknown baseline {policy!r}; allowed: {', '.join(PAPER_POLICIES)}")
        self.state, self.policy = state, policy
        n = len(state.cpu_free)
        self.rank = tie_rank(n, seed)
        self.rng = np.random.default_rng([seed, 2])
        self.scorer: FragScorer | None = None
        if policy == "fgd-paper":
            self.scorer = FragScorer(workload, "paper", paper_devices=True)
            self.scorer.refresh(state)
        width = state.gpu_free.shape[1]
        self.kinds = np.zeros((n, width + 1), dtype=np.int64)
        """Pods per node by GPU kind (column 0 sharing, k whole GPUs)."""

    def placed(self, node: int, d: Demand, sign: int = 1) -> None:
        """Book a pod placed on (``sign`` 1) or released from (-1) ``node``."""
        if self.scorer is not None:
            self.scorer.refresh(self.state, [node])
        if _kind(d) >= 0:
            self.kinds[node, _kind(d)] += sign

    def choose(self, d: Demand, mask: np.ndarray) -> tuple[int, tuple[int, ...]]:
        """(node, devices) or (-1, ()) when no node of ``mask`` fits ``d``."""
        st = self.state
        idx = np.flatnonzero(mask & st.fits(d))
        if len(idx) == 0:
            return -1, ()
        if self.policy == "random":
            node = int(idx[self.rng.integers(len(idx))])
            return node, self._devices(node, d, "random")
        device = -1
        if self.policy == "fgd-paper":
            delta, dev = self.scorer.gradient(st, d, idx)
            score = paper_score(delta)
        else:
            score = getattr(self, "_" + self.policy.replace("-", "_"))(d, idx)
        k = int(np.lexsort((self.rank[idx], -score))[0])
        node = int(idx[k])
        if self.policy == "fgd-paper" and d.shared:
            device = int(dev[k])
        return node, (device,) if device >= 0 else self._devices(node, d, "best")

    def _devices(self, node: int, d: Demand, how: str) -> tuple[int, ...]:
        if d.num_gpus == 0:
            return ()
        row = self.state.gpu_free[node]
        if not d.shared:
            return tuple(int(g) for g in np.flatnonzero(row == 1000)[: d.num_gpus])
        cand = np.flatnonzero(row >= d.gpu_milli)
        if how == "random":
            return (int(cand[self.rng.integers(len(cand))]),)
        return (int(cand[np.argmin(row[cand])]),)

    def _dotprod(self, d: Demand, idx: np.ndarray) -> np.ndarray:
        st = self.state
        dot = ((st.cpu_free[idx] / MAX_CPU) * (d.cpu_milli / MAX_CPU)
               + (st.gpu_total[idx] / MAX_GPU) * (d.total_gpu_milli / MAX_GPU))
        return (100 * (1 - dot / 2)).astype(np.int64)

    def _bestfit(self, d: Demand, idx: np.ndarray) -> np.ndarray:
        st = self.state
        left = (st.cpu_free[idx] - d.cpu_milli) / MAX_CPU * 0.5 + (st.gpu_total[idx] - d.total_gpu_milli) / MAX_GPU * 0.5
        raw = np.trunc((1 - left) * 100).astype(np.int64)
        lo, hi = int(raw.min()), int(raw.max())
        if hi == lo:
            return np.zeros(len(idx), dtype=np.int64)
        return (raw - lo) * 100 // (hi - lo)

    def _gpu_clustering(self, d: Demand, idx: np.ndarray) -> np.ndarray:
        kind = _kind(d)
        if kind < 0:
            return np.zeros(len(idx), dtype=np.int64)
        kinds = self.kinds[idx]
        base = 25 * (MAX_GPU - self.state.gpu_total[idx]) // MAX_GPU
        same, distinct = kinds[:, kind] > 0, (kinds > 0).sum(axis=1)
        bonus = np.where(same, np.where(distinct == 1, 75, 50), np.where(distinct == 0, 25, 0))
        return base + bonus

    def _gpu_packing(self, d: Demand, idx: np.ndarray) -> np.ndarray:
        if d.num_gpus == 0:
            return np.zeros(len(idx), dtype=np.int64)
        free = self.state.gpu_free[idx]
        full = (free == 1000).sum(axis=1)
        devices = (free >= 0).sum(axis=1)
        empty = np.maximum(33 - full, full)
        if not d.shared:
            used = np.maximum(50 - d.num_gpus, 33)
            return np.where(full == devices, empty, used).astype(np.int64)
        partial = np.where((free >= d.gpu_milli) & (free < 1000), free, 10_000).min(axis=1)
        on_shared = np.maximum(100 - (partial * 100 // 1000) // 10, 50)
        score = np.where(partial < 10_000, on_shared, 49)
        return np.where(full == devices, empty, score).astype(np.int64)
