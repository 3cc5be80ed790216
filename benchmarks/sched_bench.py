"""Scheduler benchmark: every Alibaba pod list under every policy (fill and queue mode), and
the 16/32/80 layout on 1024 GPUs.

    .venv/bin/python benchmarks/sched_bench.py [--data DIR] [--traces default gpushare80] [--seeds 42-51]
        [--order shuffled|file] [--fill-policies ...] [--ceiling-traces gpushare40] [--save runs.jsonl]

Fill mode follows the FGD authors' protocol by default (shuffled, resized to 130%, seeds 42-51)
and sets each policy against the authors' published curves (``fgd_published_allocation.csv``).
Prints markdown tables (the ones in docs/benchmarks.md, "## Scheduler").
"""

from __future__ import annotations

import argparse
import json
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
from kilorl.placement.baselines import PAPER_POLICIES, PUBLISHED_NAMES  # noqa: E402
from kilorl.placement.policies import POLICIES  # noqa: E402
from kilorl.placement.protocol import mean_std, read_published  # noqa: E402
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


FILL_POLICIES = ("binpack-topo", "fgd", "fgd-paper", "bestfit", "dotprod")
"""Fill mode runs these by default (every policy with ``--fill-policies all``)."""


def _run(job: tuple) -> dict:
    """One simulation (in a worker process): the summary numbers and the 1% curve."""
    data, trace, policy, mode, discipline, target, order, seed = job
    topo = read_nodes(Path(data) / "openb_node_list_gpu_node.csv")
    pods = read_pods(Path(data) / f"openb_pod_list_{trace}.csv")
    t0 = time.perf_counter()
    r = simulate(topo, pods, policy, mode=mode, target_load=target, discipline=discipline, order=order, seed=seed)
    d = r.to_dict()
    d.pop("rejected")
    d.pop("timeline")
    pts = r.points()
    if pts is not None:
        d.update(at100=pts.at100, at130=pts.at130, saturation=pts.saturation)
    d.update(trace=trace, wall_s=time.perf_counter() - t0, pods=len(pods))
    return d


def _pm(vals: list[float], fmt: str = "{:.2f}") -> str:
    m, sd = mean_std(vals)
    return fmt.format(m) + ("" if len(vals) < 2 else " ± " + fmt.format(sd))


def published_points(published: dict, trace: str, policy: str) -> tuple[float, float, float] | None:
    """Published mean allocation at 100% and 130% arrived and at saturation (mean of 100-130%)."""
    curves = published.get((trace, PUBLISHED_NAMES.get(policy, "06-FGD")))
    if curves is None:
        return None
    return (float(curves[:, 100].mean()), float(curves[:, 130].mean()), float(np.nanmean(curves[:, 100:131], axis=1).mean()))


def fill_tables(results: list[dict], traces: list[str], policies: list[str], published: dict,
                ceiling: dict[str, float]) -> str:
    """Per list: each policy against the published curves (its own for the paper's baselines,
    the published FGD for ours), and binpack-topo's gap to the packing ceiling."""
    by: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        by.setdefault((r["trace"], r["policy"]), []).append(r)
    out = ["| list | binpack-topo @100% | published FGD @100% | Δ (pt) | binpack-topo @130% | published FGD @130% "
           "| Δ (pt) | binpack-topo saturation | packing ceiling (gap) | fgd-paper − published FGD @100 / @130 (pt) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        rs, pub = by.get((t, "binpack-topo")), published_points(published, t, "fgd-paper")
        if not rs or pub is None:
            continue
        at, end, sat = ([r[k] for r in rs] for k in ("at100", "at130", "saturation"))
        ceil = ceiling.get(t)
        gap = "-" if ceil is None else f"{ceil:.2f}% ({ceil - np.mean(sat):+.2f})"
        fp = by.get((t, "fgd-paper"))
        fpd = "-" if not fp else (f"{np.mean([r['at100'] for r in fp]) - pub[0]:+.2f} / "
                                  f"{np.mean([r['at130'] for r in fp]) - pub[1]:+.2f}")
        out.append(f"| {t} | **{_pm(at)}** | {pub[0]:.2f} | {np.mean(at) - pub[0]:+.2f} | **{_pm(end)}** | {pub[1]:.2f} | "
                   f"{np.mean(end) - pub[1]:+.2f} | {_pm(sat)} | {gap} | {fpd} |")
    out += ["", "Every policy (allocation in % of the 6,212 GPUs, mean ± std over the seeds; unallocated GPUs at 100% "
            "arrived; `published`: the FGD authors' mean for the same policy, for ours their FGD; CPU time per "
            "placement decision, p99 over all seeds' decisions):", "",
            "| list | policy | seeds | @100% | @130% | saturation | unallocated GPUs @100% | published @100% / @130% "
            "| Δ @100% / @130% (pt) | CPU p50 / p99 (µs) | wall p99 (µs) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        for p in policies:
            rs = by.get((t, p))
            if not rs:
                continue
            pub = published_points(published, t, p)
            at, end = [r["at100"] for r in rs], [r["at130"] for r in rs]
            pubs = "-" if pub is None else f"{pub[0]:.2f} / {pub[1]:.2f}"
            delta = "-" if pub is None else f"{np.mean(at) - pub[0]:+.2f} / {np.mean(end) - pub[1]:+.2f}"
            out.append(f"| {t} | {p} | {len(rs)} | {_pm(at)} | {_pm(end)} | {_pm([r['saturation'] for r in rs])} | "
                       f"{_pm([r['unallocated_gpus_at_100'] for r in rs], '{:.0f}')} | {pubs} | {delta} | "
                       f"{max(r['cpu_us_p50'] for r in rs):.0f} / {max(r['cpu_us_p99'] for r in rs):.0f} | "
                       f"{max(r['latency_us_p99'] for r in rs):.0f} |")
    return "\n".join(out)


def ceilings_of(data: Path, traces: list[str], seeds: list[int], order: str, target: float) -> dict[str, float]:
    """binpack-topo's packing ceiling per list (mean over samples from 100% arrived and over seeds), in %."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sched_packing_ceiling import ceilings

    out = {}
    for t in traces:
        vals = [np.mean([c for _, _, c in ceilings(data, t, "binpack-topo", target, order, s)]) for s in seeds]
        out[t] = 100 * float(np.mean(vals))
        print(f"  ceiling {t}: {out[t]:.2f}%", file=sys.stderr, flush=True)
    return out


def queue_table(results: list[dict], traces: list[str], disciplines: list[str], policies: list[str]) -> str:
    by: dict[tuple, list[dict]] = {}
    for r in results:
        by.setdefault((r["trace"], r["policy"], r["discipline"]), []).append(r)
    out = ["| list | policy | discipline | seeds | delay p50 (s) | delay p99 (s) | mean delay (s) | drained (s) "
           "| mean alloc until drained (%) | max queued | CPU p50 / p99 (µs) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        for disc in disciplines:
            for p in policies:
                rs = by.get((t, p, disc))
                if not rs:
                    continue
                out.append(f"| {t} | {p} | {disc} | {len(rs)} | {_pm([r['delay_s_p50'] for r in rs], '{:.0f}')} | "
                           f"{_pm([r['delay_s_p99'] for r in rs], '{:.0f}')} | "
                           f"{_pm([r['delay_s_mean'] for r in rs], '{:.1f}')} | "
                           f"{_pm([r['drain_s'] for r in rs], '{:.0f}')} | "
                           f"{_pm([100 * r['mean_allocation_rate_until_drained'] for r in rs])} | "
                           f"{max(r['max_queued'] for r in rs)} | {max(r['cpu_us_p50'] for r in rs):.0f} / "
                           f"{max(r['cpu_us_p99'] for r in rs):.0f} |")
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
    from kilorl.cli.sched import parse_seeds

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=str(find_data()))
    ap.add_argument("--traces", nargs="*", default=list(TRACES), help="pod lists for fill mode (none: skip)")
    ap.add_argument("--fill-policies", nargs="*", default=list(FILL_POLICIES),
                    help="fill-mode policies ('all': ours and the paper's six baselines)")
    ap.add_argument("--queue-traces", nargs="*", default=None,
                    help="pod lists for queue mode (default: those of --traces with durations)")
    ap.add_argument("--policies", nargs="*", default=list(POLICIES), help="queue-mode policies")
    ap.add_argument("--disciplines", nargs="*", default=list(DISCIPLINES), help="queue-mode disciplines")
    ap.add_argument("--order", default="shuffled", choices=("shuffled", "file"), help="arrival order (default shuffled)")
    ap.add_argument("--seeds", default="42-51", help="seeds of fill mode: a range (42-51, default) or a list")
    ap.add_argument("--queue-seeds", default="42-44", help="seeds of queue mode (default 42-44)")
    ap.add_argument("--target-load", type=float, default=1.3)
    ap.add_argument("--ceiling-traces", nargs="*", default=[],
                    help="lists whose packing ceiling of binpack-topo is computed (needs scipy)")
    ap.add_argument("--save", help="write every run's summary (JSON lines) here")
    ap.add_argument("--load", nargs="*", default=[], help="read runs saved with --save instead of running them")
    ap.add_argument("--tables-only", action="store_true", help="run nothing: tables from the --load runs alone")
    ap.add_argument("--workers", type=int, default=1, help="simulation processes (the machine is shared)")
    ap.add_argument("--seeds-layout", type=int, default=5, help="busy-cluster seeds of the 1024-GPU layout table")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=0, help="synthetic RL jobs on the 1024-GPU cluster (0: skip)")
    ap.add_argument("--replay", action="store_true", help="add the replay-mode table of `default`")
    ap.add_argument("--no-layout", action="store_true", help="skip the 1024-GPU layout tables")
    ap.add_argument("--holes", nargs="*", default=[], help="pod lists whose idle share binpack-topo leaves is broken down")
    args = ap.parse_args()
    data = Path(args.data)
    fill_policies = list(POLICIES + PAPER_POLICIES) if args.fill_policies == ["all"] else args.fill_policies
    seeds, qseeds = parse_seeds(args.seeds), parse_seeds(args.queue_seeds)
    print(f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"numpy {np.__version__}. Command: `python benchmarks/sched_bench.py {' '.join(sys.argv[1:])}`\n")
    if not args.no_layout:
        print("### Placement of the 16/32/80 layout on 1024 GPUs\n")
        print(layout_tables(args.seeds_layout, args.repeats) + "\n")
    queue = args.queue_traces if args.queue_traces is not None else [t for t in args.traces if has_durations(data, t)]
    results = [json.loads(line) for f in args.load for line in Path(f).read_text().splitlines() if line.strip()]
    done = {(r["trace"], r["policy"], r["mode"], r.get("discipline", "fifo"), r["order"], r["seed"]) for r in results}
    jobs = [(str(data), t, p, "fill", "fifo", args.target_load, args.order, s) for t in args.traces for p in fill_policies
            for s in seeds]
    jobs += [(str(data), t, p, "queue", d, args.target_load, args.order, s) for t in queue for d in args.disciplines
             for p in args.policies for s in qseeds]
    jobs = [] if args.tables_only else [j for j in jobs if (j[1], j[2], j[3], j[4], j[6], j[7]) not in done]
    save = Path(args.save).open("a") if args.save else None
    with multiprocessing.Pool(max(1, args.workers)) as pool:
        for r in pool.imap_unordered(_run, jobs):
            r.setdefault("discipline", "fifo")
            results.append(r)
            if save:
                save.write(json.dumps({k: v for k, v in r.items() if k != "curve"}) + "\n")
                save.flush()
            print(f"  {r['trace']} {r['policy']} {r['mode']} {r['discipline']} seed {r['seed']}: {r['wall_s']:.1f}s",
                  file=sys.stderr, flush=True)
    ceiling = ceilings_of(data, args.ceiling_traces, seeds, args.order, args.target_load) if args.ceiling_traces else {}
    published = read_published(data / "fgd_published_allocation.csv")
    fill = [r for r in results if r["mode"] == "fill" and r["order"] == args.order]
    if fill and args.traces:
        ran = sorted({r["seed"] for r in fill})
        print(f"### Alibaba cluster-trace-gpu-v2023, fill mode, {args.order} order, seeds {ran[0]}-{ran[-1]}\n")
        print(fill_tables(fill, args.traces, fill_policies, published, ceiling) + "\n")
    if queue:
        print(f"### Queue mode (a backlog of {args.target_load:.0%} of the GPU capacity at t = 0, {args.order} order, "
              f"seeds {args.queue_seeds}, recorded durations)\n")
        print(queue_table([r for r in results if r["mode"] == "queue"], queue, args.disciplines, args.policies) + "\n")
    for trace in args.holes:
        print(f"### Where binpack-topo's idle share sits: `{trace}` (file order)\n")
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
