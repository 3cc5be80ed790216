"""``kilorl record``: write a dataset in Minari's format from a trained run or a named policy."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", metavar="RUN_DIR", help="a trained run (its best checkpoint, else its newest)")
    p.add_argument("--env", dest="env_id", metavar="ID", help="Gymnasium id or module:Class (without RUN_DIR)")
    p.add_argument("--policy", default="random", help="without RUN_DIR: 'random' or module:function(obs, action_space)")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("-o", "--output", required=True, metavar="DATASET", help="dataset directory to create")
    p.add_argument("--seed", type=int, default=0, help="episode k resets with seed + k")
    p.add_argument("--noise", type=float, default=0.0,
                   help="with RUN_DIR: Gaussian action noise, in half-widths of the Box action space")
    p.add_argument("--stochastic", action="store_true", help="with RUN_DIR: sample actions instead of the mode")


def run(args: argparse.Namespace) -> int:
    from kilorl.datasets import DatasetError
    from kilorl.trainer.record import record

    if (args.run is None) == (args.env_id is None):
        print("error: give a RUN_DIR or --env ID (one of them)", file=sys.stderr)
        return 2
    try:
        data = record(args.output, args.episodes, args.seed, env_id=args.env_id, policy=args.policy, run=args.run,
                      noise=args.noise, deterministic=not args.stochastic)
    except (DatasetError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"recorded {args.episodes} episodes to {data}")
    return 0
