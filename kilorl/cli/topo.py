"""``kilorl topo``: this machine's CPUs, NUMA domains, memory, GPUs, links and NICs."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--no-probe", action="store_true", help="skip the bandwidth probes")
    parser.add_argument("--nvml-recording", metavar="FILE",
                        help="read GPU facts from an NVML recording instead of the real library")
    parser.add_argument("--record-nvml", metavar="FILE",
                        help="also save the real NVML answers to FILE (for tests / bug reports)")


def run(args: argparse.Namespace) -> int:
    from kilorl.placement.discovery import discover, render
    from kilorl.placement.nvml import NvmlUnavailable, PynvmlSource, RecordedSource, record

    source = None
    if args.nvml_recording:
        try:
            with open(args.nvml_recording) as fh:
                source = RecordedSource(json.load(fh))
        except (OSError, ValueError) as err:
            print(f"error: --nvml-recording {args.nvml_recording}: {err}", file=sys.stderr)
            return 2
    if args.record_nvml:
        try:
            data = record(PynvmlSource())
        except NvmlUnavailable as err:
            data = {"format": "kilorl-nvml-recording/1", "error": str(err), "devices": [], "common_ancestor": []}
        with open(args.record_nvml, "w") as fh:
            json.dump(data, fh, indent=1)
    host = discover(source, probe=not args.no_probe)
    print(json.dumps(host.to_dict(), indent=2) if args.json else render(host))
    return 0
