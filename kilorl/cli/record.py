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
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="an env constructor argument (repeatable; the value read as YAML), over the run's "
                        "env.kwargs: record on a perturbed copy of the env, e.g. --env-kwarg g=12.0")


def env_kwargs(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as constructor arguments (``ConfigError`` naming a malformed one)."""
    from kilorl.config import ConfigError, parse_override

    out: dict[str, object] = {}
    for text in pairs:
        if "=" not in text:
            raise ConfigError(f"--env-kwarg {text!r}: expected KEY=VALUE")
        path, value = parse_override(text)
        if len(path) != 1:
            raise ConfigError(f"--env-kwarg {text!r}: expected KEY=VALUE with a plain key")
        out[path[0]] = value
    return out


def run(args: argparse.Namespace) -> int:
    from kilorl.config import ConfigError
    from kilorl.datasets import DatasetError
    from kilorl.trainer.record import record

    if (args.run is None) == (args.env_id is None):
        print("error: give a RUN_DIR or --env ID (one of them)", file=sys.stderr)
        return 2
    try:
        data = record(args.output, args.episodes, args.seed, env_id=args.env_id, policy=args.policy, run=args.run,
                      noise=args.noise, deterministic=not args.stochastic, env_kwargs=env_kwargs(args.env_kwarg))
    except (ConfigError, DatasetError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"recorded {args.episodes} episodes to {data}")
    return 0
