"""``kilorl sched simulate``: replay a job trace on a cluster under one or all policies.

Either the Alibaba ``cluster-trace-gpu-v2023`` CSVs (``--nodes NODES.csv --trace PODS.csv``)
or a topology YAML plus a synthetic RL job mix (``--cluster FILE --synthetic-jobs N``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sched_command", metavar="SUBCOMMAND")
    sim = sub.add_parser("simulate", help="trace-driven simulation", description=__doc__)
    sim.add_argument("--nodes", metavar="NODES.csv", help="node list (sn, cpu_milli, memory_mib, gpu, model)")
    sim.add_argument("--trace", metavar="PODS.csv", help="pod list (name, cpu_milli, memory_mib, num_gpu, gpu_milli, ...)")
    sim.add_argument("--cluster", metavar="FILE", help="topology YAML (with --synthetic-jobs)")
    sim.add_argument("--synthetic-jobs", type=int, metavar="N", help="simulate N synthetic RL jobs on --cluster")
    sim.add_argument("--seed", type=int, default=0, help="seed of the synthetic job mix")
    sim.add_argument("--interarrival-s", type=float, default=30.0, help="mean seconds between synthetic jobs")
    sim.add_argument("--policy", default="all",
                     help="a policy or a comma-separated list: ours (binpack-topo, fgd, first-fit, spread, pack), the "
                          "FGD paper's baselines (random, dotprod, gpu-clustering, gpu-packing, bestfit, fgd-paper; "
                          "trace modes only), 'all' (ours, default) or 'paper' (the baselines)")
    sim.add_argument("--order", default="shuffled", choices=("shuffled", "file"),
                     help="fill and queue modes: 'shuffled' (the FGD authors' protocol, default): the list shuffled "
                          "with each seed and resized to --target-load by sampling with replacement or trimming at "
                          "random; 'file': the list in file order, submitted again until --target-load")
    sim.add_argument("--estimate", default="seen", choices=("seen", "list"),
                     help="binpack-topo's workload estimate: the pods seen so far (default; re-estimated each time "
                          "their number doubles) or the whole list")
    sim.add_argument("--seeds", default="42-51",
                     help="seeds of the shuffled order and of the baselines' tie order: a list (42,43) or a range "
                          "(42-51, default: the published runs' seeds); results are mean ± std over them")
    sim.add_argument("--mode", default="fill", choices=("fill", "replay", "queue"),
                     help="fill: arrivals only until --target-load, misfits dropped (FGD method, default); "
                          "replay: recorded arrivals and departures; queue: a backlog of --target-load x capacity "
                          "that waits for room and runs for the recorded durations")
    sim.add_argument("--discipline", default="fifo", choices=("fifo", "backfill", "reserve"),
                     help="queue mode: strict arrival order; start any pod that fits; or EASY backfilling: the "
                          "oldest waiting pod reserves the node it fits on soonest (recorded durations), others "
                          "start elsewhere or end before it (default fifo)")
    sim.add_argument("--target-load", type=float, default=1.3,
                     help="fill and queue modes: GPU share submitted, x capacity (default 1.3)")
    sim.add_argument("--limit", type=int, help="use only the first N pods of the trace")
    sim.add_argument("--json", action="store_true", help="print JSON (with the allocation timeline)")


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` -> the seeds (``--seeds``)."""
    try:
        if "-" in text.strip().lstrip("-"):
            lo, hi = (int(x) for x in text.split("-", 1))
            if hi < lo:
                raise ValueError
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: give a list (42,43) or a range (42-51)") from None


def parse_policies(text: str, allowed: tuple[str, ...], ours: tuple[str, ...], paper: tuple[str, ...]) -> list[str]:
    """``--policy``: one name, a comma-separated list, ``all`` (ours) or ``paper`` (the baselines)."""
    out: list[str] = []
    for name in (x.strip() for x in text.split(",") if x.strip()):
        group = list(ours) if name == "all" else list(paper) if name == "paper" else [name]
        for p in group:
            if p not in allowed:
                raise ValueError(f"--policy {name!r}; allowed: {', '.join(allowed)}, all, paper")
            if p not in out:
                out.append(p)
    if not out:
        raise ValueError("--policy names no policy")
    return out


def _pm(values: list[float], fmt: str = "{:.2f}") -> str:
    from kilorl.placement.protocol import mean_std

    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    m, sd = mean_std(vals)
    return fmt.format(m) + ("" if len(vals) == 1 else " ± " + fmt.format(sd))


def _fill_table(by_policy: dict[str, list[Any]]) -> str:
    """Per policy over its seeds: allocation (%) at 100% / 130% arrived and saturation, unallocated GPUs."""
    rows = [f"{'policy':<15}{'seeds':>6}{'alloc@100%':>16}{'alloc@130%':>16}{'alloc@sat':>16}{'unalloc@100%':>18}"
            f"{'unalloc@130%':>18}{'failed':>8}{'cpu p99 us':>11}"]
    for policy, runs in by_policy.items():
        ds = [r.to_dict() for r in runs]
        pts = [r.points() for r in runs]
        at = [None if p is None else p.at100 for p in pts]
        end = [None if p is None else p.at130 for p in pts]
        sat = [None if d["saturated_allocation_rate"] is None else 100 * d["saturated_allocation_rate"] for d in ds]
        rows.append(f"{policy:<15}{len(runs):>6}{_pm(at):>16}{_pm(end):>16}{_pm(sat):>16}"
                    f"{_pm([d['unallocated_gpus_at_100'] for d in ds], '{:.1f}'):>18}"
                    f"{_pm([d['unallocated_gpus'] for d in ds], '{:.1f}'):>18}"
                    f"{round(sum(d['failed'] for d in ds) / len(ds)):>8}{max(d['cpu_us_p99'] for d in ds):>11.0f}")
    return "\n".join(rows)


def _queue_table(by_policy: dict[str, list[Any]]) -> str:
    rows = [f"{'policy':<15}{'seeds':>6}{'pods':>7}{'delay p50 s':>16}{'delay p99 s':>18}{'drained s':>18}"
            f"{'alloc until drained %':>22}{'cpu p99 us':>11}"]
    for policy, runs in by_policy.items():
        x = [r.extra for r in runs]
        rows.append(f"{policy:<15}{len(runs):>6}{round(sum(r.arrived for r in runs) / len(runs)):>7}"
                    f"{_pm([e['delay_s_p50'] for e in x], '{:.0f}'):>16}{_pm([e['delay_s_p99'] for e in x], '{:.0f}'):>18}"
                    f"{_pm([e['drain_s'] for e in x], '{:.0f}'):>18}"
                    f"{_pm([100 * e['mean_allocation_rate_until_drained'] for e in x]):>22}"
                    f"{max(r.to_dict()['cpu_us_p99'] for r in runs):>11.0f}")
    return "\n".join(rows)


def _single_table(results: list[Any]) -> str:
    """Replay and synthetic-job modes: one run per policy."""
    rows = [f"{'policy':<15}{'arrived':>8}{'placed':>8}{'failed':>8}{'alloc end':>10}{'unalloc GPU':>12}"
            f"{'frag GPU':>10}{'p50 us':>9}{'p99 us':>9}"]
    for r in results:
        d = r.to_dict()
        rows.append(f"{r.policy:<15}{d['arrived']:>8}{d['placed']:>8}{d['failed']:>8}{d['final_allocation_rate']:>10.2%}"
                    f"{d['unallocated_gpus']:>12.1f}{d['final_fragmentation_gpus']:>10.1f}"
                    f"{d['latency_us_p50']:>9.0f}{d['latency_us_p99']:>9.0f}")
    return "\n".join(rows)


def _simulate_trace(args: argparse.Namespace, policies: list[str], seeds: list[int]):
    from kilorl.placement.alibaba import read_nodes, read_pods
    from kilorl.placement.simulate import simulate

    topo, pods = read_nodes(args.nodes), read_pods(args.trace)
    if args.limit:
        pods = pods[: args.limit]
    if args.target_load <= 0:
        raise ValueError("--target-load must be > 0")
    runs = seeds if args.mode != "replay" else seeds[:1]
    by_policy = {p: [simulate(topo, pods, p, mode=args.mode, target_load=args.target_load, discipline=args.discipline,
                              order=args.order, seed=s, estimate=args.estimate) for s in runs] for p in policies}
    source = f"{args.nodes} + {args.trace} ({len(pods)} pods), mode {args.mode}"
    if args.mode == "queue":
        source += f" ({args.discipline})"
    if args.mode != "replay":
        source += f", order {args.order}, target load {args.target_load:g}, seeds {','.join(map(str, runs))}"
    return topo, by_policy, source


def run(args: argparse.Namespace) -> int:
    if args.sched_command != "simulate":
        print("usage: kilorl sched simulate (--nodes NODES.csv --trace PODS.csv | --cluster FILE --synthetic-jobs N)",
              file=sys.stderr)
        return 2
    from kilorl.placement.alibaba import TraceError
    from kilorl.placement.baselines import PAPER_POLICIES
    from kilorl.placement.policies import POLICIES
    from kilorl.placement.simulate import SIM_POLICIES, simulate_jobs
    from kilorl.placement.synthetic import rl_job_mix
    from kilorl.placement.topo_yaml import TopologyError, load_topology

    try:
        seeds = parse_seeds(args.seeds)
        if args.trace or args.nodes:
            if not (args.trace and args.nodes):
                raise ValueError("--nodes and --trace go together")
            policies = parse_policies(args.policy, SIM_POLICIES, POLICIES, PAPER_POLICIES)
            topo, by_policy, source = _simulate_trace(args, policies, seeds)
        elif args.cluster and args.synthetic_jobs:
            policies = parse_policies(args.policy, POLICIES, POLICIES, ())
            topo = load_topology(args.cluster)
            jobs = rl_job_mix(args.synthetic_jobs, seed=args.seed, mean_interarrival_s=args.interarrival_s)
            by_policy = {p: [simulate_jobs(topo, jobs, p)] for p in policies}
            source = f"{args.cluster} + {args.synthetic_jobs} synthetic RL jobs (seed {args.seed})"
        else:
            raise ValueError("give --nodes NODES.csv --trace PODS.csv, or --cluster FILE --synthetic-jobs N")
    except (TraceError, TopologyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = [r for runs in by_policy.values() for r in runs]
    if args.json:
        print(json.dumps({"source": source, "cluster": topo.summary(), "results": [r.to_dict() for r in results]}, indent=1))
        return 0
    print(f"cluster   {topo.summary()}")
    print(f"trace     {source}")
    mode = results[0].mode
    if mode == "fill":
        print(_fill_table(by_policy))
        print("alloc@N%: GPU allocation (% of capacity) once N% of the capacity has arrived as GPU demand, read as the "
              "FGD authors do; alloc@sat: its mean from 100% arrived on; unalloc: idle GPUs; mean ± std over the seeds")
    elif mode == "queue":
        print(_queue_table(by_policy))
    else:
        print(_single_table(results))
        for r in results:
            if r.extra:
                print(f"{r.policy:<15}" + ", ".join(f"{k} {v}" for k, v in r.extra.items()))
    return 0
