"""``kilorl plan CONFIG``: where each role of a run would go on a described cluster.

A dry run: nothing starts. The cluster is ``--cluster FILE`` (topology YAML), the running Ray
cluster at ``--address`` (the topology and plan ``kilorl train`` builds there), or a uniform
``--nodes`` x ``--gpus-per-node`` NVLink cluster with 16 nodes per leaf switch.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kilorl.trainer.planning import requests_from_config
from kilorl.trainer.role_placement import plan_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="run config YAML")
    parser.add_argument("--nodes", type=int, default=128, help="nodes of the uniform cluster (default 128)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node of the uniform cluster (default 8)")
    parser.add_argument("--nodes-per-leaf", type=int, default=16, help="nodes per leaf switch of the uniform cluster")
    parser.add_argument("--cluster", metavar="FILE", help="topology YAML (replaces --nodes/--gpus-per-node)")
    parser.add_argument("--address", help="plan on the running Ray cluster at this address ('auto': the one "
                                          "this machine runs), as kilorl train would (replaces --nodes/--cluster)")
    parser.add_argument("--policy", default="binpack-topo", help="binpack-topo (default), first-fit, spread, pack")
    parser.add_argument("--compare", action="store_true", help="also score every other policy")
    parser.add_argument("--gradient-mb", type=float, default=400.0,
                        help="bytes all-reduced per learner step, MB (default 400: a 100M-parameter fp32 model)")
    parser.add_argument("--show-instances", action="store_true", help="list every instance's node and devices")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field (section.field=value)")


def explain(placement: Any, requests: list) -> list[str]:
    topo = placement.state.topology
    island = max((len(v) for nd in topo.nodes for v in nd.islands.values()), default=0)
    out = []
    for req in requests:
        s = placement.role_summary(req.role)
        d = req.demand
        where = f"{len(s['nodes'])} node(s) under {len(s['leaves'])} leaf switch(es)"
        if req.collective:
            need = req.count * d.total_gpu_milli / 1000
            fit = "fits in one NVLink island" if need <= island else f"is more than one NVLink island ({island} GPUs)"
            ar = placement.allreduce[req.role]
            out.append(f"{req.role}: {req.count} x {d.total_gpu_milli / 1000:g} GPU = {need:g} GPUs {fit}; "
                       f"packed onto {where} ({s['islands']} island(s)); all-reduce ~{ar.seconds * 1e3:.2f} ms, "
                       f"slowest link {ar.worst_link}")
        elif any(a.kind == "near_role" for a in req.affinities):
            target = next(a.role for a in req.affinities if a.kind == "near_role")
            tnodes = set(placement.role_summary(target)["nodes"])
            same = sum(1 for a in placement.by_role()[req.role] if topo.nodes[a.node].name in tnodes)
            out.append(f"{req.role}: near {target}: {same}/{req.count} on {target} nodes, all on {where}")
        else:
            per_gpu = f", {1000 // d.gpu_milli} per shared GPU" if d.shared else ""
            out.append(f"{req.role}: {req.count} x {d.total_gpu_milli / 1000:g} GPU packed onto {where}{per_gpu}")
    return out


def _attached(cfg: Any, address: str) -> tuple[Any, Any]:
    """The config as ``kilorl train`` reserves it and the Ray cluster's topology as it reads it."""
    from kilorl.trainer.cluster import Cluster
    from kilorl.trainer.role_placement import training_config

    return training_config(cfg), Cluster(address=address).topology()


def run(args: argparse.Namespace) -> int:
    from kilorl.config import ConfigError, load_config
    from kilorl.placement import CapacityState, PlacementError, TopologyError, load_topology, place, uniform_topology
    from kilorl.placement.policies import POLICIES
    from kilorl.trainer.cluster import ClusterError

    try:
        cfg = load_config(args.config, args.override, check_env=False)
        if args.address and args.cluster:
            raise ValueError("give either --address or --cluster, not both")
        if args.address:
            cfg, topo = _attached(cfg, args.address)
        elif args.cluster:
            topo = load_topology(args.cluster)
        else:
            if args.nodes < 1 or args.gpus_per_node < 0:
                raise TopologyError("--nodes must be >= 1 and --gpus-per-node >= 0")
            topo = uniform_topology(args.nodes, args.gpus_per_node, nodes_per_leaf=args.nodes_per_leaf)
        if args.policy not in POLICIES:
            raise ValueError(f"--policy {args.policy!r}; allowed: {', '.join(POLICIES)}")
    except (ConfigError, TopologyError, ValueError, ClusterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        requests = requests_from_config(cfg, topo)  # resources.<role>.nodes: labels of the topology's nodes
    except PlacementError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    state = CapacityState(topo)
    policies = [args.policy] + ([p for p in POLICIES if p != args.policy] if args.compare else [])
    results: dict[str, Any] = {}
    for pol in policies:
        try:
            results[pol] = place(state, requests, pol, gradient_bytes=args.gradient_mb * 1e6)
        except PlacementError as err:
            results[pol] = err
    main = results[args.policy]
    if args.json:
        out: dict[str, Any] = {"cluster": topo.summary(), "config": args.config}
        if not isinstance(main, Exception):
            out["plan"] = plan_summary(main)  # role -> node per instance, as kilorl train prints it
        for pol, r in results.items():
            out[pol] = {"error": str(r)} if isinstance(r, Exception) else {**r.to_dict(), "explain": explain(r, requests)}
            if not args.show_instances and not isinstance(r, Exception):
                out[pol].pop("instances")
        print(json.dumps(out, indent=2))
        return 0 if not isinstance(main, Exception) else 1
    print(f"cluster   {topo.summary()}")
    print(f"config    {args.config}: learner {cfg.parallelism.learner}, parameter_server "
          f"{cfg.parallelism.parameter_server}, actor {cfg.parallelism.actor}")
    if isinstance(main, Exception):
        print(f"error: {main}", file=sys.stderr)
        return 1
    print(f"policy    {args.policy}: placed in {main.seconds * 1e3:.1f} ms, GPU allocation "
          f"{main.allocation_rate:.2%}, fragmentation {main.fragmentation_gpus:.2f} GPUs")
    if args.address:  # the line kilorl train prints at start-up on this cluster
        print(f"plan      {json.dumps(plan_summary(main))}")
    print(f"{'role':<18}{'count':>6}{'gpu/inst':>9}{'nodes':>7}{'leaves':>7}{'islands':>8}  where")
    for req in requests:
        s = main.role_summary(req.role)
        nodes = s["nodes"]
        shown = ", ".join(nodes[:4]) + (f", ... (+{len(nodes) - 4})" if len(nodes) > 4 else "")
        print(f"{req.role:<18}{req.count:>6}{req.demand.total_gpu_milli / 1000:>9g}{len(nodes):>7}"
              f"{len(s['leaves']):>7}{s['islands']:>8}  {shown}")
    print("why")
    for line in explain(main, requests):
        print(f"  {line}")
    if args.show_instances:
        for row in main.to_dict()["instances"]:
            print(f"  {row['role']}[{row['instance']}] -> {row['node']} gpus {row['gpus']} share {row['gpu_share']:g}")
    if args.compare:
        print(f"\n{'policy':<14}{'ms':>8}{'alloc':>8}{'frag GPUs':>10}{'learner AR ms':>14}{'nodes':>6}{'leaves':>7}")
        for pol, r in results.items():
            if isinstance(r, Exception):
                print(f"{pol:<14} {r}")
                continue
            ar = r.allreduce["learner"]
            print(f"{pol:<14}{r.seconds * 1e3:>8.1f}{r.allocation_rate:>8.2%}{r.fragmentation_gpus:>10.2f}"
                  f"{ar.seconds * 1e3:>14.2f}{ar.nodes:>6}{ar.leaves:>7}")
    return 0
