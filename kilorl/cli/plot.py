"""``kilorl plot``: learning curves of runs to a PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("-o", "--output", help="PNG path (default: <first run>/curves.png)")


def run(args: argparse.Namespace) -> int:
    from kilorl.trainer.plotting import plot_runs

    out = Path(args.output) if args.output else Path(args.runs[0]) / "curves.png"
    try:
        plot_runs([Path(r) for r in args.runs], out)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"plot: {out}")
    return 0
