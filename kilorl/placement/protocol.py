"""The FGD authors' experiment: which pods arrive in which order, and how a run is read out.

Their protocol (``hkust-adsl/kubernetes-scheduler-simulator``, the paper's artifact): the pod
list, sorted by name, is shuffled with the seed; then it is resized to ``target_load`` x the
cluster's GPU capacity, by appending pods drawn with replacement from the list (until the next
draw would pass the target) or by removing pods at random (until it is under); pods arrive one
by one in that order, never leave, and a pod that fits nowhere is dropped. They run seeds
42-51 and read the allocation at every 1% of arrived GPU demand (``allocation_curve``).

``order="file"`` is the other experiment this project ran first: the list in file (creation
time) order, submitted again and again until ``target_load`` is reached.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kilorl.placement.alibaba import TracePod

ORDERS: tuple[str, ...] = ("shuffled", "file")
DEFAULT_SEEDS: tuple[int, ...] = tuple(range(42, 52))
"""The seeds of the published runs."""


def repeat_sequence(pods: Sequence[TracePod], capacity_milli: int, target_load: float) -> list[TracePod]:
    """The list in file order, submitted again and again until the GPU share asked reaches ``target_load`` x capacity."""
    _check(pods, target_load)
    out, asked, k = [], 0, 0
    while asked < target_load * capacity_milli:
        pod = pods[k % len(pods)]
        out.append(pod)
        asked += pod.demand.total_gpu_milli
        k += 1
    return out


def shuffled_sequence(pods: Sequence[TracePod], capacity_milli: int, target_load: float, seed: int) -> list[TracePod]:
    """The authors' arrival order: sort by name, shuffle with ``seed``, resize to ``target_load`` x capacity."""
    _check(pods, target_load)
    rng = np.random.default_rng(seed)
    base = sorted(pods, key=lambda p: p.name)
    out = [base[i] for i in rng.permutation(len(base))]
    target = target_load * capacity_milli
    asked = sum(p.demand.total_gpu_milli for p in out)
    if asked > target:
        while asked > target:
            asked -= out.pop(int(rng.integers(len(out)))).demand.total_gpu_milli
        return out
    while True:
        pod = base[int(rng.integers(len(base)))]
        if asked + pod.demand.total_gpu_milli > target:
            return out
        out.append(pod)
        asked += pod.demand.total_gpu_milli


def arrival_sequence(pods: Sequence[TracePod], capacity_milli: int, target_load: float, order: str = "shuffled",
                     seed: int = 42) -> list[TracePod]:
    """The pods of one fill-mode run, in arrival order (``order``: ``shuffled`` or ``file``)."""
    if order == "shuffled":
        return shuffled_sequence(pods, capacity_milli, target_load, seed)
    if order == "file":
        return repeat_sequence(pods, capacity_milli, target_load)
    raise ValueError(f"unknown order {order!r}; allowed: {', '.join(ORDERS)}")


def _check(pods: Sequence[TracePod], target_load: float) -> None:
    if target_load <= 0:
        raise ValueError(f"target_load must be > 0 (got {target_load})")
    if sum(p.demand.total_gpu_milli for p in pods) == 0:
        raise ValueError("fill and queue modes need pods that ask for GPUs")


def allocation_curve(arrived_milli: np.ndarray, allocated_milli: np.ndarray, capacity_milli: int,
                     top: int = 130) -> np.ndarray:
    """Allocation (%) at every 1% of arrived GPU demand, 0..``top``, read the authors' way.

    One sample after each arrival; a sample belongs to the percent its arrived demand rounds
    to; a percent's value is the mean of its samples (each rounded to 0.01 %), or of the
    neighbouring percents' when it has none (NaN when those are empty too).
    """
    arr = np.round(np.asarray(arrived_milli, dtype=np.float64) / capacity_milli * 100)
    alloc = np.round(np.asarray(allocated_milli, dtype=np.float64) / capacity_milli * 100, 2)
    out = np.full(top + 1, np.nan)
    for b in range(top + 1):
        vals = alloc[arr == b]
        if not len(vals):
            vals = alloc[(arr >= b - 1) & (arr <= b + 1)]
        if len(vals):
            out[b] = vals.mean()
    return out


@dataclass(frozen=True)
class CurvePoints:
    """What a run (or a policy over seeds) is reported by, in % of the GPU capacity."""

    at100: float
    at130: float
    """At the end of the curve (130% arrived), or its last percent with samples (a small cluster
    and big pods can leave the last percents empty)."""
    saturation: float
    """Mean of the curve from 100% arrived to its end (the paper's 'saturated' range)."""

    @classmethod
    def of(cls, curve: np.ndarray, top: int = 130) -> CurvePoints:
        c = np.asarray(curve, dtype=np.float64)[: top + 1]
        if len(c) <= 100 or np.isnan(c[100:]).all():
            raise ValueError("the curve does not reach 100% arrived")
        tail = c[100:][~np.isnan(c[100:])]
        return cls(float(c[100]) if not np.isnan(c[100]) else float(tail[0]), float(tail[-1]), float(tail.mean()))


def read_published(path: str | Path) -> dict[tuple[str, str], np.ndarray]:
    """The authors' published curves: (pod list, ``sc_policy``) -> [seeds, 131] allocation in %.

    Pod lists are named as our files without the prefix (``default``, ``gpushare40``, ...)."""
    out: dict[tuple[str, str], list[list[float]]] = {}
    with Path(path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["workload"].removeprefix("openb_pod_list_"), row["sc_policy"])
            out.setdefault(key, []).append([float(row[str(b)]) if row.get(str(b)) else np.nan for b in range(131)])
    return {k: np.array(v) for k, v in out.items()}


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0
