"""Scheduler benchmark: Alibaba GPU trace (all policies) and the 16/32/80 layout on 1024 GPUs.

    .venv/bin/python benchmarks/sched_bench.py [--data DIR] [--traces default multigpu30] [--seeds 5]

Prints markdown tables (the ones in docs/benchmarks.md, "## Scheduler").
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kilorl.placement import Allocation, CapacityState, load_topology, place  # noqa: E402
from kilorl.placement.alibaba import read_nodes, read_pods  # noqa: E402
from kilorl.placement.policies import POLICIES  # noqa: E402
from kilorl.placement.simulate import simulate, simulate_jobs  # noqa: E402
from kilorl.placement.synthetic import rl_job_mix  # noqa: E402


def trace_table(data: Path, trace: str, target_load: float) -> str:
    topo = read_nodes(data / "openb_node_list_gpu_node.csv")
    pods = read_pods(data / f"openb_pod_list_{trace}.csv")
    gpu_demand = sum(p.demand.total_gpu_milli for p in pods) / 1000
    lines = [
        f"Trace `openb_pod_list_{trace}.csv`: {len(pods)} pods asking {gpu_demand:.0f} GPUs in all; "
        f"cluster {len(topo.nodes)} nodes, {topo.total_gpus} GPUs. Fill mode up to {target_load:.0%} arrived.",
        "",
        "| policy | alloc @100% arrived | alloc @130% (saturated) | mean alloc, arrived >= 100% | unallocated GPUs @130% "
        "| FGD frag GPUs @130% | pods rejected | place p50 / p99 (us) | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy in POLICIES:
        t0 = time.perf_counter()
        r = simulate(topo, pods, policy, mode="fill", target_load=target_load)
        wall = time.perf_counter() - t0
        at = {round(s["arrived_load"], 2): s["allocation_rate"] for s in r.timeline}
        lat = np.array(r.latencies_us)
        lines.append(
            f"| {policy} | {at.get(1.0, float('nan')):.2%} | {r.final_allocation_rate:.2%} | "
            f"{r.saturated_allocation_rate():.2%} | {r.unallocated_gpus:.1f} | {r.final_fragmentation_gpus:.1f} | "
            f"{r.failed} / {r.arrived} | {np.percentile(lat, 50):.0f} / {np.percentile(lat, 99):.0f} | {wall:.1f} |"
        )
        print(f"  {trace} {policy}: {wall:.1f}s", file=sys.stderr)
    return "\n".join(lines)


def replay_table(data: Path, trace: str) -> str:
    topo = read_nodes(data / "openb_node_list_gpu_node.csv")
    pods = read_pods(data / f"openb_pod_list_{trace}.csv")
    lines = ["| policy | pods rejected | peak alloc | time-mean alloc | place p50 / p99 (us) |", "|---|---|---|---|---|"]
    for policy in POLICIES:
        r = simulate(topo, pods, policy, mode="replay")
        lat = np.array(r.latencies_us)
        lines.append(f"| {policy} | {r.failed} / {r.arrived} | {r.extra['peak_allocation_rate']:.2%} | "
                     f"{r.extra['mean_allocation_rate']:.2%} | {np.percentile(lat, 50):.0f} / {np.percentile(lat, 99):.0f} |")
    return "\n".join(lines)


def jobs_table(jobs: int, interarrival_s: float) -> str:
    topo = load_topology(REPO / "examples/clusters/1024xH100.yaml")
    mix = rl_job_mix(jobs, seed=0, mean_interarrival_s=interarrival_s)
    lines = ["| policy | jobs rejected | time-mean alloc | peak alloc | mean learner all-reduce (ms) | place p50 / p99 (ms) |",
             "|---|---|---|---|---|---|"]
    for policy in POLICIES:
        r = simulate_jobs(topo, mix, policy)
        lat = np.array(r.latencies_us) / 1e3
        lines.append(f"| {policy} | {r.failed} / {r.arrived} | {r.extra['mean_allocation_rate']:.2%} | "
                     f"{r.extra['peak_allocation_rate']:.2%} | {r.extra['mean_allreduce_ms']:.2f} | "
                     f"{np.percentile(lat, 50):.1f} / {np.percentile(lat, 99):.1f} |")
        print(f"  jobs {policy} done", file=sys.stderr)
    return "\n".join(lines)


def reference_requests():
    from kilorl.cli.plan import requests_from_config
    from kilorl.config import load_config

    return requests_from_config(load_config(REPO / "examples/plan_1024.yaml", check_env=False))


def busy_state(state: CapacityState, seed: int, frac: float = 0.4) -> CapacityState:
    """Background load: ``frac`` of the nodes run 1-7 whole GPUs of other jobs (lowest indices)."""
    rng = np.random.default_rng(seed)
    busy = state.copy()
    for n in range(len(state.cpu_free)):
        if rng.random() < frac:
            k = int(rng.integers(1, 8))
            busy.allocate(Allocation("background", n, n, tuple(range(k)), 1000, 8000 * k, 65536 * k))
    return busy


def layout_tables(seeds: int, repeats: int) -> str:
    topo = load_topology(REPO / "examples/clusters/1024xH100.yaml")
    reqs = reference_requests()
    empty = CapacityState(topo)
    out = [
        "Reference layout (`examples/plan_1024.yaml`: 16 parameter servers, 32 learners x 1 GPU, 80 actors x 0.5 GPU) "
        "on `examples/clusters/1024xH100.yaml` (128 nodes x 8 H100, NVSwitch, 8 x 50 GB/s rails, 16 nodes per leaf). "
        "Learner all-reduce: 400 MB of gradients (100M fp32 parameters), hierarchical estimate (docs/placement.md).",
        "",
        "Empty cluster:",
        "",
        "| policy | place first call, wall (ms) | place median of %d, wall (ms) | median CPU time (ms) | learner all-reduce (ms) | learner nodes | learner leaves | PS on learner nodes |" % repeats,
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy in POLICIES:
        t0 = time.perf_counter()
        p = place(empty, reqs, policy)
        first = (time.perf_counter() - t0) * 1e3
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            place(empty, reqs, policy)
            times.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
        ar = p.allreduce["learner"]
        lnodes = {a.node for a in p.by_role()["learner"]}
        ps_near = sum(a.node in lnodes for a in p.by_role()["parameter_server"])
        out.append(f"| {policy} | {first:.1f} | {statistics.median(times):.1f} | {statistics.median(cpu):.1f} | "
                   f"{ar.seconds * 1e3:.2f} | {ar.nodes} | "
                   f"{ar.leaves} | {ps_near}/16 |")
    out += [
        "",
        f"Busy cluster (40% of nodes already run 1-7 GPUs of other jobs; {seeds} seeds; medians):",
        "",
        "| policy | place median (ms) | learner all-reduce median (ms) | min - max (ms) | learner nodes (median) | leaves (median) | seeds where binpack-topo is lower |",
        "|---|---|---|---|---|---|---|",
    ]
    per: dict[str, list] = {p: [] for p in POLICIES}
    for seed in range(seeds):
        state = busy_state(empty, seed)
        for policy in POLICIES:
            t0 = time.perf_counter()
            p = place(state, reqs, policy)
            per[policy].append(((time.perf_counter() - t0) * 1e3, p.allreduce["learner"]))
    ours = [ar.seconds for _, ar in per["binpack-topo"]]
    for policy in POLICIES:
        ms = [t for t, _ in per[policy]]
        ars = [ar.seconds * 1e3 for _, ar in per[policy]]
        wins = "-" if policy == "binpack-topo" else f"{sum(o < ar.seconds for o, (_, ar) in zip(ours, per[policy]))}/{seeds}"
        out.append(f"| {policy} | {statistics.median(ms):.1f} | {statistics.median(ars):.2f} | {min(ars):.2f} - {max(ars):.2f} | "
                   f"{statistics.median(ar.nodes for _, ar in per[policy]):g} | {statistics.median(ar.leaves for _, ar in per[policy]):g} | {wins} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(REPO.parent / "shared/data/alibaba-gpu-v2023"))
    ap.add_argument("--traces", nargs="*", default=["default"], help="default, multigpu30 (none: skip)")
    ap.add_argument("--target-load", type=float, default=1.3)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=400, help="synthetic RL jobs on the 1024-GPU cluster (0: skip)")
    ap.add_argument("--no-replay", action="store_true", help="skip the replay-mode table")
    args = ap.parse_args()
    print(f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"numpy {np.__version__}. Command: `python benchmarks/sched_bench.py {' '.join(sys.argv[1:])}`\n")
    print("### Placement of the 16/32/80 layout on 1024 GPUs\n")
    print(layout_tables(args.seeds, args.repeats) + "\n")
    data = Path(args.data)
    for trace in args.traces:
        print(f"### Alibaba cluster-trace-gpu-v2023, `{trace}`\n")
        print(trace_table(data, trace, args.target_load) + "\n")
    if not args.no_replay:
        print("### Alibaba `default`, replay mode (arrivals and departures as recorded)\n")
        print(replay_table(data, "default") + "\n")
    if args.jobs:
        print(f"### Synthetic RL job mix on 1024 x H100 ({args.jobs} jobs, seed 0, mean inter-arrival 20 s, "
              "mean duration 1 h)\n")
        print(jobs_table(args.jobs, 20.0) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
