"""Examples that hold across seeds (issue 37, acceptance item 5): train, then judge the final
and the best checkpoint on episodes the run never saw.

    python benchmarks/examples_over_seeds.py --example cartpole --layouts 1x8,2/2/2 --seeds 1-10
    python benchmarks/examples_over_seeds.py --example lunarlander --layouts 2/2/2 --seeds 1-3

A layout ``AxE`` is ``A`` actors of ``E`` envs, one learner, one parameter-server shard;
``A/L/P`` is ``A`` actors, ``L`` learners, ``P`` shards, with the example's envs per actor
halved per actor beyond one (so 2/2/2 of CartPole's 1 x 8 is 2 actors x 4 envs: the same
8 envs per rollout). Each run is the shipped example with ``--seed`` and the layout; it keeps
its ``best`` checkpoint only where the example's ``evaluation`` section says so.

Per run: what ``kilorl eval RUN --checkpoint latest`` (the final policy) and ``--checkpoint
best`` report, 20 deterministic episodes from seed 1,000,000 (the run evaluated itself on
seeds from 2,000,000; the best is not played again when it is the final checkpoint's
step), the env steps and training seconds at the run's first evaluation at or above the
threshold (env steps do not depend on the machine's load; seconds do), and whether the
threshold was met within ``TRAIN_TIME_LIMIT_S``. Prints the table and, per layout, the
counts the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THRESHOLDS = {"cartpole": 475.0, "lunarlander": 200.0}
TRAIN_TIME_LIMIT_S = {"lunarlander": 400.0}
"""LunarLander: eval >= 200 "within 400 s of training"."""
EVAL_EPISODES = 20


@dataclass
class Layout:
    actors: int
    envs_per_actor: int
    learners: int
    shards: int

    @classmethod
    def parse(cls, text: str, example_envs: int) -> Layout:
        """``AxE`` or ``A/L/P`` (see the module docstring); a clear error otherwise."""
        try:
            if "x" in text:
                a, e = (int(x) for x in text.split("x"))
                return cls(a, e, 1, 1)
            a, learners, shards = (int(x) for x in text.split("/"))
        except ValueError:
            raise SystemExit(f"--layouts: {text!r} is neither AxE nor A/L/P") from None
        if example_envs % a:
            raise SystemExit(f"--layouts: {text!r}: {a} actors cannot split the example's {example_envs} envs")
        return cls(a, example_envs // a, learners, shards)

    def overrides(self) -> list[str]:
        return [f"parallelism.actor={self.actors}", f"parallelism.envs_per_actor={self.envs_per_actor}",
                f"parallelism.learner={self.learners}", f"parallelism.parameter_server={self.shards}"]

    def name(self) -> str:
        return f"{self.actors}x{self.envs_per_actor}/{self.learners}/{self.shards}"


@dataclass
class Run:
    layout: str
    seed: int
    rc: int
    env_steps: int | None = None
    final_eval: float | None = None
    best_eval: float | None = None
    first_hit_env_steps: int | None = None
    first_hit_train_s: float | None = None
    train_s: float | None = None
    startup_s: float | None = None
    process_s: float = 0.0
    error: str = ""


def kilorl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("RAY_ADDRESS", "local")  # never join another user's `ray start` cluster
    return subprocess.run([sys.executable, "-m", "kilorl.cli.main", *args], capture_output=True, text=True,
                          check=check, env=env)


def evaluate(run_dir: Path, checkpoint: str) -> tuple[float | None, int | None]:
    """``(mean return, env steps of the checkpoint)`` over ``EVAL_EPISODES`` deterministic
    episodes from seed 1,000,000 (``kilorl eval``'s), in this process: one torch import for
    every run of the sweep instead of one per evaluation."""
    from kilorl.trainer.evaluate import evaluate as play

    try:
        got = play(run_dir, episodes=EVAL_EPISODES, checkpoint=checkpoint)
    except (FileNotFoundError, ValueError) as err:
        print(f"{run_dir.name}: no {checkpoint} checkpoint to evaluate ({err})", file=sys.stderr)
        return None, None
    return got.episode_return_mean, got.env_steps


def checkpoint_steps(run_dir: Path, checkpoint: str) -> int | None:
    from kilorl.trainer.checkpoint import select_checkpoint

    try:
        meta = select_checkpoint(run_dir, checkpoint) / "meta.json"
    except (FileNotFoundError, ValueError):
        return None
    return json.loads(meta.read_text())["env_steps"] if meta.is_file() else None


def run_one(config: Path, layout: Layout, seed: int, out: Path, threshold: float, extra: list[str]) -> Run:
    run_dir = out / f"{config.stem}-{layout.name().replace('/', '_')}-s{seed}"
    t0 = time.time()
    got = kilorl("train", str(config), "--seed", str(seed), "--run-dir", str(run_dir),
                 "-o", "logging.progress=false", "-o", "logging.tensorboard=false",
                 *(a for o in layout.overrides() + extra for a in ("-o", o)), check=False)
    r = Run(layout.name(), seed, got.returncode, process_s=time.time() - t0)
    if got.returncode != 0:
        r.error = got.stderr.strip().splitlines()[-1] if got.stderr.strip() else f"exit {got.returncode}"
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    if rows:
        last = rows[-1]
        r.env_steps, r.train_s, r.startup_s = last.get("env_steps"), last.get("train_time"), last.get("startup_s")
        hit = next((x for x in rows if x.get("eval_return_mean") is not None and x["eval_return_mean"] >= threshold),
                   None)
        if hit is not None:
            r.first_hit_env_steps, r.first_hit_train_s = hit["env_steps"], hit.get("train_time")
    r.final_eval, final_steps = evaluate(run_dir, "latest")
    if (run_dir / "checkpoints" / "best").exists():
        if final_steps is not None and checkpoint_steps(run_dir, "best") == final_steps:
            r.best_eval = r.final_eval  # the run stopped on the policy it kept as best: the same weights
        else:
            r.best_eval, _ = evaluate(run_dir, "best")
    return r


def met(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def summary(runs: list[Run], threshold: float, time_limit: float | None) -> list[str]:
    lines = []
    for layout in dict.fromkeys(r.layout for r in runs):
        mine = [r for r in runs if r.layout == layout]
        n = len(mine)
        final = sum(met(r.final_eval, threshold) for r in mine)
        best = sum(met(r.best_eval, threshold) for r in mine)
        line = f"{layout}: final eval >= {threshold:g} on {final}/{n}, best >= {threshold:g} on {best}/{n}"
        if time_limit is not None:
            timely = sum(r.first_hit_train_s is not None and r.first_hit_train_s <= time_limit for r in mine)
            line += f", an evaluation >= {threshold:g} within {time_limit:g} s of training on {timely}/{n}"
        lines.append(line)
    return lines


def fmt(x: float | int | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def report(runs: list[Run], threshold: float, limit: float | None) -> None:
    """The table of every run, then the counts per layout."""
    print(f"\n| layout | seed | env steps | final eval | best eval | first eval >= {threshold:g}: env steps "
          "| its train s | train s | start-up s |\n|---|---|---|---|---|---|---|---|---|")
    for r in sorted(runs, key=lambda r: (r.layout, r.seed)):
        print(f"| {r.layout} | {r.seed} | {fmt(r.env_steps, ',')} | {fmt(r.final_eval)} | {fmt(r.best_eval)} "
              f"| {fmt(r.first_hit_env_steps, ',')} | {fmt(r.first_hit_train_s, '.0f')} | {fmt(r.train_s, '.0f')} "
              f"| {fmt(r.startup_s)} |" + (f" error: {r.error}" if r.error else ""))
    print()
    for line in summary(runs, threshold, limit):
        print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", default="cartpole", choices=sorted(THRESHOLDS))
    ap.add_argument("--layouts", default="1x8,2/2/2")
    ap.add_argument("--seeds", default="1-10", help="A-B or a comma list")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "examples-over-seeds")
    ap.add_argument("-o", "--override", action="append", default=[], help="more overrides for every run")
    ap.add_argument("--json", type=Path, help="append each run as one JSON line")
    ap.add_argument("--report", type=Path, help="run nothing: print the table and counts of the runs in this "
                    "--json file (a sweep split over several invocations, each sized to the machine)")
    args = ap.parse_args(argv)
    threshold = THRESHOLDS[args.example]
    limit = TRAIN_TIME_LIMIT_S.get(args.example)
    if args.report:
        runs = [Run(**json.loads(x)) for x in args.report.read_text().splitlines() if x.strip()]
        report(runs, threshold, limit)
        return 0
    import yaml

    config = REPO / "examples" / f"{args.example}_ppo.yaml"
    cfg = yaml.safe_load(config.read_text())
    envs = cfg["parallelism"]["actor"] * cfg["parallelism"]["envs_per_actor"]
    layouts = [Layout.parse(x, envs) for x in args.layouts.split(",")]
    if "-" in args.seeds:
        lo, hi = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    runs = []
    for seed in seeds:  # the layouts alternate, so load drifts hit both alike
        for layout in layouts:
            r = run_one(config, layout, seed, args.out, threshold, args.override)
            runs.append(r)
            print(json.dumps(asdict(r)), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(asdict(r)) + "\n")
    report(runs, threshold, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
