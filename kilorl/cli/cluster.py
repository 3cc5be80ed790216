"""``kilorl cluster describe``: nodes, devices, links, backend, and where a config's roles go.

Without options it describes this machine (or the Ray cluster at ``--address``); with
``--nodes``/``--gpus-per-node`` it describes hardware on paper (nothing starts).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND", required=True)
    d = sub.add_parser("describe", help="print nodes, devices, links and placed roles")
    d.add_argument("--nodes", type=int, help="describe a cluster of this many nodes (planning only)")
    d.add_argument("--gpus-per-node", type=int, help="GPUs per described node")
    d.add_argument("--address", help="Ray address to attach to ('auto' for a running cluster)")
    d.add_argument("--backend", default="auto", help="communication backend: auto, gloo, nccl or a registered plugin")
    d.add_argument("--config", help="also place this run config's roles")
    d.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a field of --config (repeatable)")
    d.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from kilorl.config import ConfigError, load_config
    from kilorl.placement import PlacementError
    from kilorl.trainer.cluster import Cluster, ClusterError

    try:
        cluster = Cluster(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          communication_backend=args.backend, address=args.address)
        cfg = load_config(args.config, args.override, check_env=False) if args.config else None
        desc = cluster.describe(cfg)
    except (ClusterError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except PlacementError as err:
        print(f"error: the config's roles do not fit: {err}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(desc), indent=2) if args.json else desc.render())
    return 0
