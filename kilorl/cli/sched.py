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
    sim.add_argument("--policy", default="all", help="binpack-topo, fgd, first-fit, spread, pack, or all (default)")
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


def _table(results: list[Any]) -> str:
    if results and results[0].mode == "queue":
        return _queue_table(results)
    head = (f"{'policy':<14}{'arrived':>8}{'placed':>8}{'failed':>8}{'alloc@sat':>10}{'alloc end':>10}"
            f"{'unalloc GPU':>12}{'frag GPU':>10}{'p50 us':>9}{'p99 us':>9}")
    rows = [head]
    for r in results:
        d = r.to_dict()
        sat = d["saturated_allocation_rate"]
        rows.append(f"{r.policy:<14}{d['arrived']:>8}{d['placed']:>8}{d['failed']:>8}"
                    f"{(f'{sat:.2%}' if sat is not None else '-'):>10}{d['final_allocation_rate']:>10.2%}"
                    f"{d['unallocated_gpus']:>12.1f}{d['final_fragmentation_gpus']:>10.1f}"
                    f"{d['latency_us_p50']:>9.0f}{d['latency_us_p99']:>9.0f}")
    return "\n".join(rows)


def _queue_table(results: list[Any]) -> str:
    rows = [f"{'policy':<14}{'pods':>7}{'delay p50 s':>12}{'delay p99 s':>12}{'drained s':>10}{'makespan s':>12}"
            f"{'alloc until drained':>20}{'p50 us':>9}{'p99 us':>9}"]
    for r in results:
        d, x = r.to_dict(), r.extra
        rows.append(f"{r.policy:<14}{d['arrived']:>7}{x['delay_s_p50']:>12.0f}{x['delay_s_p99']:>12.0f}{x['drain_s']:>10.0f}"
                    f"{x['makespan_s']:>12.0f}{x['mean_allocation_rate_until_drained']:>20.2%}"
                    f"{d['latency_us_p50']:>9.0f}{d['latency_us_p99']:>9.0f}")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    if args.sched_command != "simulate":
        print("usage: kilorl sched simulate (--nodes NODES.csv --trace PODS.csv | --cluster FILE --synthetic-jobs N)",
              file=sys.stderr)
        return 2
    from kilorl.placement.alibaba import TraceError, read_nodes, read_pods
    from kilorl.placement.policies import POLICIES
    from kilorl.placement.simulate import simulate, simulate_jobs
    from kilorl.placement.synthetic import rl_job_mix
    from kilorl.placement.topo_yaml import TopologyError, load_topology

    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    try:
        if args.policy != "all" and args.policy not in POLICIES:
            raise ValueError(f"--policy {args.policy!r}; allowed: {', '.join(POLICIES)}, all")
        if args.trace or args.nodes:
            if not (args.trace and args.nodes):
                raise ValueError("--nodes and --trace go together")
            topo, pods = read_nodes(args.nodes), read_pods(args.trace)
            if args.limit:
                pods = pods[: args.limit]
            if args.target_load <= 0:
                raise ValueError("--target-load must be > 0")
            results = [simulate(topo, pods, p, mode=args.mode, target_load=args.target_load, discipline=args.discipline)
                       for p in policies]
            source = f"{args.nodes} + {args.trace} ({len(pods)} pods), mode {args.mode}"
            if args.mode == "queue":
                source += f" ({args.discipline})"
        elif args.cluster and args.synthetic_jobs:
            topo = load_topology(args.cluster)
            jobs = rl_job_mix(args.synthetic_jobs, seed=args.seed, mean_interarrival_s=args.interarrival_s)
            results = [simulate_jobs(topo, jobs, p) for p in policies]
            source = f"{args.cluster} + {args.synthetic_jobs} synthetic RL jobs (seed {args.seed})"
        else:
            raise ValueError("give --nodes NODES.csv --trace PODS.csv, or --cluster FILE --synthetic-jobs N")
    except (TraceError, TopologyError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"source": source, "cluster": topo.summary(), "results": [r.to_dict() for r in results]}, indent=1))
        return 0
    print(f"cluster   {topo.summary()}")
    print(f"trace     {source}")
    print(_table(results))
    for r in results:
        if r.extra and r.mode != "queue":
            print(f"{r.policy:<14}" + ", ".join(f"{k} {v}" for k, v in r.extra.items()))
    if results and results[0].mode == "fill":
        print("alloc@sat: mean GPU allocation rate once arrived GPU demand >= 100% of capacity (saturated)")
    return 0
