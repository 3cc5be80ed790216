"""How far a policy's fill-mode packing is from the best packing of the same pods.

    python benchmarks/sched_packing_ceiling.py [--traces gpushare40 default] [--policies binpack-topo fgd]

Needs scipy (not a kilorl dependency: ``pip install scipy`` in the environment you run it in).

Why: the sliver floor (docs/placement.md) bounds the idle share from the pods of > 0.5 GPU
alone, so its ceiling is loose where the other shares do not pair well (0.47 + 0.47 leaves
0.06 on every device). This script takes, at each fill-mode sample from 100% arrived on, the
GPU-sharing pods the policy has placed so far, and computes with the LP relaxation of bin
packing (Gilmore-Gomory column generation, the pricing a knapsack on the shares' common
grid) the fewest devices that could hold them. The *packing ceiling* is the allocation if
exactly those pods sat on that many devices and every other device held whole-GPU pods:
CPU and memory are ignored, so no repacking of the same pods, online or offline, does
better. A policy's `saturated` can only reach X% if the mean ceiling of its placed pods is
at least X%; below that, it needs to place other pods, not to pack the same ones better.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kilorl.placement.alibaba import read_nodes, read_pods  # noqa: E402
from kilorl.placement.fragmentation import Workload  # noqa: E402
from kilorl.placement.protocol import arrival_sequence  # noqa: E402
from kilorl.placement.simulate import CHECKPOINT_STEP, PodScheduler  # noqa: E402
from kilorl.placement.state import CapacityState  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from sched_bench import find_data  # noqa: E402


def _knapsack(values: np.ndarray, sizes: np.ndarray, cap: int) -> tuple[float, np.ndarray]:
    """Unbounded knapsack on an integer grid: best value and the item counts that give it."""
    best = np.zeros(cap + 1)
    last = np.full(cap + 1, -1)
    for c in range(1, cap + 1):
        best[c], last[c] = best[c - 1], -2  # -2: same as c - 1
        for i, (v, s) in enumerate(zip(values, sizes, strict=True)):
            if s <= c and best[c - s] + v > best[c] + 1e-12:
                best[c], last[c] = best[c - s] + v, i
    counts, c = np.zeros(len(sizes)), cap
    while c > 0 and last[c] != -1:
        if last[c] == -2:
            c -= 1
        else:
            counts[last[c]] += 1
            c -= sizes[last[c]]
    return float(best[cap]), counts


def fewest_devices(shares: Counter[int]) -> int:
    """A lower bound on the devices (1000 milli each) that hold these shares: the LP bound, rounded up."""
    from scipy.optimize import linprog

    sizes = sorted(shares, reverse=True)
    grid = math.gcd(1000, *sizes)
    sz, cap = np.array(sizes) // grid, 1000 // grid
    demand = np.array([shares[s] for s in sizes], dtype=np.float64)
    patterns = [np.eye(len(sizes))[i] * (cap // sz[i]) for i in range(len(sizes))]
    while True:
        a = np.array(patterns).T
        res = linprog(np.ones(len(patterns)), A_ub=-a, b_ub=-demand, bounds=(0, None), method="highs")
        value, counts = _knapsack(-res.ineqlin.marginals, sz, cap)
        if value <= 1 + 1e-9:
            return math.ceil(res.fun - 1e-6)
        patterns.append(counts)


def ceilings(data: Path, trace: str, policy: str, target: float = 1.3, order: str = "file",
             seed: int = 42) -> list[tuple[float, float, float]]:
    """(arrived load, allocation, packing ceiling) at every fill-mode sample from 100% arrived
    (``order``/``seed``: the arrival order, ``protocol.arrival_sequence``; binpack-topo estimates
    its workload from the pods seen so far, as in ``simulate``)."""
    topo = read_nodes(data / "openb_node_list_gpu_node.csv")
    pods = read_pods(data / f"openb_pod_list_{trace}.csv")
    state = CapacityState(topo)
    demands = [p.demand for p in pods]
    sched = PodScheduler(state, policy, Workload.of(demands, state.model_names), seed=seed,
                         paper_workload=Workload.typical(demands, state.model_names), estimate="seen")
    cap, arrived, placed = state.gpu_capacity_milli, 0, Counter()
    marks = [round(CHECKPOINT_STEP * i, 6) for i in range(1, int(round(target / CHECKPOINT_STEP)) + 1)]
    out = []
    for pod in arrival_sequence(pods, cap, target, order, seed):
        sched.observe(pod)
        if sched.try_place(pod) is not None and pod.demand.shared:
            placed[pod.demand.gpu_milli] += 1
        arrived += pod.demand.total_gpu_milli
        while marks and arrived >= marks[0] * cap:
            load = marks.pop(0)
            if load >= 1.0 - 1e-9:
                idle = fewest_devices(placed) * 1000 - sum(s * n for s, n in placed.items())
                out.append((load, state.allocation_rate, 1 - idle / cap))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(find_data()))
    ap.add_argument("--traces", nargs="*", default=["gpushare40", "default"])
    ap.add_argument("--policies", nargs="*", default=["binpack-topo", "fgd"])
    ap.add_argument("--order", default="file", choices=("shuffled", "file"), help="arrival order (default file)")
    ap.add_argument("--seed", type=int, default=42, help="seed of the shuffled order")
    args = ap.parse_args()
    print("| trace | policy | saturated | packing ceiling (mean over 100-130%) | ceiling @100% | ceiling @130% |")
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        for policy in args.policies:
            rows = ceilings(Path(args.data), trace, policy, order=args.order, seed=args.seed)
            sat, ceil = np.mean([r[1] for r in rows]), np.mean([r[2] for r in rows])
            print(f"| {trace} | {policy} | {sat:.2%} | {ceil:.2%} | {rows[0][2]:.2%} | {rows[-1][2]:.2%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
