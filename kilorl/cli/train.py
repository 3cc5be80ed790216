"""``kilorl train``: train from a YAML config, or resume a run."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

from kilorl.config import ConfigError
from kilorl.trainer import early_stop


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config (omit with --resume)")
    p.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a config field (repeatable), e.g. -o algo.lr=1e-3")
    p.add_argument("--run-dir", help="run directory (default runs/<env>-<algo>-<timestamp>)")
    p.add_argument("--seed", type=int, help="shorthand for -o train.seed=N")
    p.add_argument("--address", help="Ray address of an existing cluster ('auto' to discover)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint")
    p.add_argument("--store", metavar="HOST:PORT",
                   help="use this running store worker for the parameters (default: one per Ray node, started)")
    p.add_argument("--store-token", help="token of the --store worker (default $KILORL_STORE_TOKEN)")
    p.add_argument("--backend", default="auto",
                   help="learners' communication backend: auto (default), gloo, nccl or a registered plugin")


def run(args: argparse.Namespace) -> int:
    from kilorl.config import load_config
    from kilorl.trainer import Cluster, ClusterError, StartupError, Trainer

    overrides = list(args.override) + ([f"train.seed={args.seed}"] if args.seed is not None else [])
    try:
        cluster = Cluster(address=args.address, communication_backend=args.backend)
        if args.resume:
            if args.config:
                print("error: give either CONFIG or --resume RUN_DIR, not both", file=sys.stderr)
                return 2
            trainer = Trainer.resume(args.resume, cluster, overrides)
        else:
            if not args.config:
                print("error: CONFIG is required (or --resume RUN_DIR)", file=sys.stderr)
                return 2
            trainer = Trainer(load_config(args.config, overrides), args.run_dir, cluster)
    except (ConfigError, ClusterError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    warnings.showwarning = _plain_warning
    if args.store:  # the string as given (an override would YAML-parse it)
        trainer.cfg.store.address = args.store
    if args.store_token:  # kept out of the run's config.yaml: the driver hands it to the roles
        os.environ["KILORL_STORE_TOKEN"] = args.store_token
    try:
        result = trainer.fit()
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except StartupError as err:
        print(f"error: {err} (every role this run started was stopped)", file=sys.stderr)
        return 1
    except Exception as err:
        if early_stop.kind_of(err) is None:
            raise
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return _stopped_early(trainer.run_dir, None)
    if result.stopped is not None:
        return _stopped_early(result.run_dir, result.checkpoint)
    ret = "n/a" if result.episode_return_mean is None else f"{result.episode_return_mean:.1f}"
    print(f"done: {result.env_steps} env steps in {result.wall_time:.1f}s (startup {result.startup_s:.1f}s), "
          f"return (last {trainer.cfg.logging.return_window} episodes) {ret}"
          + ("" if result.eval_return_mean is None else f", last evaluation {result.eval_return_mean:.1f}"))
    print(f"run dir: {result.run_dir}\ncheckpoint: {result.checkpoint}")
    return 0


def _stopped_early(run_dir: Path, checkpoint: Path | None) -> int:
    """The run ended before its budget: its stop row (kilorl.trainer.early_stop) is the last line, never "done"."""
    row = early_stop.stopped_row(run_dir)
    print(f"run dir: {run_dir}" + ("" if checkpoint is None else f"\ncheckpoint: {checkpoint}"))
    print(early_stop.describe_row(row) if row else f"stopped early: see {run_dir / 'metrics.jsonl'}", flush=True)
    return early_stop.EXIT_STOPPED


def _plain_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   file: object = None, line: str | None = None) -> None:
    """``warning: ...`` on stderr, without the source line Python would print."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
