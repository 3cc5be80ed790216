"""Scheduler benchmark: every Alibaba pod list under every policy (fill and queue mode), and
the 16/32/80 layout on 1024 GPUs.

    .venv/bin/python benchmarks/sched_bench.py [--data DIR] [--traces default gpushare80] [--workers 2]

Prints markdown tables (the ones in docs/benchmarks.md, "## Scheduler").
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kilorl.placement import Allocation, load_topology, place  # noqa: E402
from kilorl.placement.alibaba import read_nodes, read_pods  # noqa: E402
from kilorl.placement.policies import POLICIES  # noqa: E402
from kilorl.placement.queueing import DISCIPLINES  # noqa: E402
from kilorl.placement.simulate import simulate, simulate_jobs  # noqa: E402
from kilorl.placement.state import CapacityState  # noqa: E402
from kilorl.placement.synthetic import rl_job_mix  # noqa: E402

TRACES = ("default", "cpu100", "gpushare40", "gpushare80", "gpuspec10", "gpuspec20", "multigpu20", "multigpu30",
          "multigpu40")


def find_data() -> Path:
    """``../shared/data/alibaba-gpu-v2023`` beside the checkout (a CI clone, /work/main), or beside
    the directory holding a git worktree (/work/wt/NAME)."""
    for base in (REPO.parent, REPO.parent.parent):
        cand = base / "shared/data/alibaba-gpu-v2023"
        if cand.is_dir():
            return cand
    return REPO.parent / "shared/data/alibaba-gpu-v2023"


def _run(job: tuple[str, str, str, str, str, float]) -> dict:
    """One simulation (in a worker process): the summary numbers only."""
    data, trace, policy, mode, discipline, target = job
    topo = read_nodes(Path(data) / "openb_node_list_gpu_node.csv")
    pods = read_pods(Path(data) / f"openb_pod_list_{trace}.csv")
    t0 = time.perf_counter()
    r = simulate(topo, pods, policy, mode=mode, target_load=target, discipline=discipline)
    d = r.to_dict()
    d.pop("rejected")
    d["at"] = {round(s["arrived_load"], 2): s["allocation_rate"] for s in d.pop("timeline") if "arrived_load" in s}
    d.update(trace=trace, wall_s=time.perf_counter() - t0, pods=len(pods))
    return d


def fill_tables(results: list[dict], traces: list[str]) -> str:
    """Per trace: every policy in fill mode; then the summary and where the idle GPUs sit."""
    by = {(r["trace"], r["policy"]): r for r in results}
    out = ["| trace | " + " | ".join(POLICIES) + " | binpack-topo - fgd (pt) |", "|---|" + "---|" * (len(POLICIES) + 1)]
    for t in traces:
        sat = [by[(t, p)]["saturated_allocation_rate"] for p in POLICIES]
        ours, fgd = sat[POLICIES.index("binpack-topo")], sat[POLICIES.index("fgd")]
        cells = [f"**{v:.2%}**" if p == "binpack-topo" else f"{v:.2%}" for p, v in zip(POLICIES, sat, strict=True)]
        out.append(f"| {t} | " + " | ".join(cells) + f" | {100 * (ours - fgd):+.2f} |")
    out += ["", "Per trace (alloc @100% arrived, mean alloc over 100-130% arrived = `saturated`, at 130%; "
            "unallocated GPUs and FGD fragmentation (paper measure) at 130%; placement latency wall and CPU time):", ""]
    out += ["| trace | policy | alloc @100% | saturated | alloc @130% | unallocated GPUs | frag GPUs | rejected "
            "| wall p50 / p99 (µs) | CPU p50 / p99 (µs) | run (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        for p in POLICIES:
            r = by[(t, p)]
            out.append(f"| {t} | {p} | {r['at'].get(1.0, float('nan')):.2%} | {r['saturated_allocation_rate']:.2%} | "
                       f"{r['final_allocation_rate']:.2%} | {r['unallocated_gpus']:.1f} | {r['final_fragmentation_gpus']:.1f} | "
                       f"{r['failed']} / {r['arrived']} | {r['latency_us_p50']:.0f} / {r['latency_us_p99']:.0f} | "
                       f"{r['cpu_us_p50']:.0f} / {r['cpu_us_p99']:.0f} | {r['wall_s']:.1f} |")
    out += ["", "Where binpack-topo's idle GPUs sit at 130% arrived (GPUs; `p_fit`: share of the trace's GPU tasks "
            "that fit on the node now; sliver floor: idle GPUs implied by the placed pods of > 0.5 GPU, "
            "see docs/placement.md):", "",
            "| trace | free | no task fits | of which CPU/memory short | only rare tasks fit (p_fit < 5%) | "
            "common tasks fit | sliver floor | allocation ceiling from the floor |", "|---|---|---|---|---|---|---|---|"]
    for t in traces:
        r = by[(t, "binpack-topo")]
        lo = r["leftover"]
        ceiling = 1 - r["sliver_floor_gpus"] / r["gpus"]
        out.append(f"| {t} | {lo['free']:.1f} | {lo['no_task_fits']:.1f} | {lo['cpu_or_memory_short']:.1f} | "
                   f"{lo['only_rare_tasks_fit']:.1f} | {lo['common_tasks_fit']:.1f} | {r['sliver_floor_gpus']:.1f} | "
                   f"{ceiling:.2%} |")
    return "\n".join(out)


def queue_table(results: list[dict], traces: list[str], disciplines: list[str], policies: list[str]) -> str:
    by = {(r["trace"], r["policy"], r["discipline"]): r for r in results}
    out = ["| trace | policy | discipline | delay p50 / p99 (s) | mean delay (s) | drained (s) | makespan (s) "
           "| mean alloc until drained | max queued | CPU p50 / p99 (µs) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        for disc in disciplines:
            for p in policies:
                r = by[(t, p, disc)]
                out.append(f"| {t} | {p} | {disc} | {r['delay_s_p50']:.0f} / {r['delay_s_p99']:.0f} | {r['delay_s_mean']:.1f} | "
                           f"{r['drain_s']:.0f} | {r['makespan_s']:.0f} | {r['mean_allocation_rate_until_drained']:.2%} | "
                           f"{r['max_queued']} | {r['cpu_us_p50']:.0f} / {r['cpu_us_p99']:.0f} |")
    return "\n".join(out)


def holes_table(data: Path, trace: str) -> str:
    """binpack-topo in fill mode on ``trace``: where the idle share sits at the end, by the room
    left on each device and whether a task of the list could use it, and which shares were rejected."""
    from collections import Counter

    from kilorl.placement.fragmentation import Workload
    from kilorl.placement.simulate import PodScheduler, fill_sequence

    topo = read_nodes(data / "openb_node_list_gpu_node.csv")
    pods = read_pods(data / f"openb_pod_list_{trace}.csv")
    state = CapacityState(topo)
    sched = PodScheduler(state, "binpack-topo", Workload.of([p.demand for p in pods], state.model_names))
    arrived, rejected = Counter(), Counter()
    seq = fill_sequence(pods, state.gpu_capacity_milli, 1.3)
    for pod in seq:
        d = pod.demand
        key = f"{d.gpu_milli}" if d.shared else (f"{d.num_gpus} GPU" if d.num_gpus else "CPU")
        arrived[key] += 1
        rejected[key] += sched.try_place(pod) is None
    shared = sorted({p.demand for p in pods if p.demand.shared}, key=lambda d: d.gpu_milli)
    idle: Counter = Counter()
    for n, g in zip(*np.nonzero(state.gpu_free > 0), strict=True):
        room = int(state.gpu_free[n, g])
        by_gpu = [d for d in shared if d.gpu_milli <= room]
        fits = any(state.cpu_free[n] >= d.cpu_milli and state.mem_free[n] >= d.mem_mib for d in by_gpu)
        size = "1000" if room == 1000 else ("< 50" if room < 50 else ("50-219" if room < 220 else "220-999"))
        idle[(size, "a pod of the list fits" if fits else ("CPU/memory short" if by_gpu else "no share that small"))] += room
    lines = [f"`{trace}`: {len(seq) / len(pods):.2f} passes of the list; idle GPU share at 130% arrived by the room "
             "left on its device (milli) and whether some sharing pod of the list fits there:", "",
             "| room | a pod of the list fits | CPU/memory short | no share that small |", "|---|---|---|---|"]
    for size in ("< 50", "50-219", "220-999", "1000"):
        cells = [f"{idle[(size, c)] / 1000:.1f}" for c in ("a pod of the list fits", "CPU/memory short", "no share that small")]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    lines += ["", "Rejected / arrived pods by GPU share (milli) or GPU count: " + ", ".join(
        f"{k}: {rejected[k]}/{arrived[k]}" for k in sorted(arrived, key=lambda k: (len(k), k)))]
    return "\n".join(lines)


def has_durations(data: Path, trace: str) -> bool:
    header = (data / f"openb_pod_list_{trace}.csv").open().readline()
    return "deletion_time" in header


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
        f"| policy | place first call, wall (ms) | place median of {repeats}, wall (ms) | median CPU time (ms) "
        "| learner all-reduce (ms) | learner nodes | learner leaves | learner islands | PS on learner nodes |",
        "|---|---|---|---|---|---|---|---|---|",
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
                   f"{ar.leaves} | {p.role_summary('learner')['islands']} | {ps_near}/16 |")
    out += [
        "",
        f"Busy cluster (40% of nodes already run 1-7 GPUs of other jobs; {seeds} seeds; medians):",
        "",
        "| policy | place median (ms) | learner all-reduce median (ms) | min - max (ms) | learner nodes (median) "
        "| leaves (median) | seeds where binpack-topo is lower |",
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
        nodes = statistics.median(ar.nodes for _, ar in per[policy])
        leaves = statistics.median(ar.leaves for _, ar in per[policy])
        out.append(f"| {policy} | {statistics.median(ms):.1f} | {statistics.median(ars):.2f} | {min(ars):.2f} - {max(ars):.2f} | "
                   f"{nodes:g} | {leaves:g} | {wins} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(find_data()))
    ap.add_argument("--traces", nargs="*", default=list(TRACES), help="pod lists for fill mode (none: skip)")
    ap.add_argument("--queue-traces", nargs="*", default=None,
                    help="pod lists for queue mode (default: those of --traces with durations)")
    ap.add_argument("--policies", nargs="*", default=list(POLICIES), help="queue-mode policies (fill mode runs all)")
    ap.add_argument("--disciplines", nargs="*", default=list(DISCIPLINES), help="queue-mode disciplines")
    ap.add_argument("--target-load", type=float, default=1.3)
    ap.add_argument("--workers", type=int, default=2, help="simulation processes (the machine is shared)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=0, help="synthetic RL jobs on the 1024-GPU cluster (0: skip)")
    ap.add_argument("--replay", action="store_true", help="add the replay-mode table of `default`")
    ap.add_argument("--no-layout", action="store_true", help="skip the 1024-GPU layout tables")
    ap.add_argument("--holes", nargs="*", default=[], help="pod lists whose idle share binpack-topo leaves is broken down")
    args = ap.parse_args()
    data = Path(args.data)
    print(f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"numpy {np.__version__}. Command: `python benchmarks/sched_bench.py {' '.join(sys.argv[1:])}`\n")
    if not args.no_layout:
        print("### Placement of the 16/32/80 layout on 1024 GPUs\n")
        print(layout_tables(args.seeds, args.repeats) + "\n")
    queue = args.queue_traces if args.queue_traces is not None else [t for t in args.traces if has_durations(data, t)]
    jobs = [(str(data), t, p, "fill", "fifo", args.target_load) for t in args.traces for p in POLICIES]
    jobs += [(str(data), t, p, "queue", d, args.target_load) for t in queue for d in args.disciplines for p in args.policies]
    with multiprocessing.Pool(max(1, args.workers)) as pool:
        results = []
        for r in pool.imap_unordered(_run, jobs):
            results.append(r)
            print(f"  {r['trace']} {r['policy']} {r['mode']} {r.get('discipline', '')}: {r['wall_s']:.1f}s",
                  file=sys.stderr, flush=True)
    if args.traces:
        print(f"### Alibaba cluster-trace-gpu-v2023, fill mode, saturated allocation (up to {args.target_load:.0%} "
              "arrived)\n")
        print(fill_tables([r for r in results if r["mode"] == "fill"], args.traces) + "\n")
    if queue:
        print(f"### Queue mode (a backlog of {args.target_load:.0%} of the GPU capacity at t = 0, recorded durations)\n")
        print(queue_table([r for r in results if r["mode"] == "queue"], queue, args.disciplines, args.policies) + "\n")
    for trace in args.holes:
        print(f"### Where binpack-topo's idle share sits: `{trace}`\n")
        print(holes_table(data, trace) + "\n")
    if args.replay:
        print("### Alibaba `default`, replay mode (arrivals and departures as recorded)\n")
        print(replay_table(data, "default") + "\n")
    if args.jobs:
        print(f"### Synthetic RL job mix on 1024 x H100 ({args.jobs} jobs, seed 0, mean inter-arrival 20 s, "
              "mean duration 1 h)\n")
        print(jobs_table(args.jobs, 20.0) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
