"""``kilorl top RUN_DIR``: the roles of a training run, their throughput and memory trends, live."""

from __future__ import annotations

import argparse
import sys
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory of a run started with monitor.prometheus.enabled")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="print one table and exit")


def run(args: argparse.Namespace) -> int:
    from kilorl.monitor.top import collect, read_targets, render
    from kilorl.trainer.early_stop import describe_row, stopped_row

    if args.interval <= 0:
        print("error: --interval must be > 0", file=sys.stderr)
        return 2
    try:
        while True:
            rows, errors = collect(args.run_dir)
            table = render(rows, errors)
            stop = stopped_row(args.run_dir)  # the run's last metrics row, once it stopped early
            if stop is not None:
                table += "\n" + describe_row(stop)
            if args.once:
                print(table)
                return 0
            print("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S ") + args.run_dir + "\n" + table, flush=True)
            time.sleep(args.interval)
            if not read_targets(args.run_dir):
                stop = stopped_row(args.run_dir)
                print(describe_row(stop) if stop else "the run has ended (no exporters in its targets file)")
                return 0
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
