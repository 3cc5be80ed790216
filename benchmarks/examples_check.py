"""Train each shipped example for several seeds and evaluate the final checkpoint.

    python benchmarks/examples_check.py --examples cartpole,lunarlander,pendulum,cartpole_a2c --seeds 1,2,3

An example name is ``examples/<name>.yaml`` or, without an algorithm suffix,
``examples/<name>_ppo.yaml``; its threshold is the environment's (the part before ``_``).

Prints a markdown table: per run the final 20-episode rolling training return, the
deterministic evaluation over 20 episodes, env steps, training wall time (excluding
Ray start-up) and start-up time, and whether the issue's threshold was met.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THRESHOLDS = {"cartpole": 475.0, "lunarlander": 200.0, "pendulum": -250.0}
TRAIN_TIME_LIMIT_S = {"lunarlander": 400.0}
"""The issue's "within 400 s of training" for LunarLander."""


def config_path(example: str) -> Path:
    own = REPO / "examples" / f"{example}.yaml"
    return own if own.is_file() else REPO / "examples" / f"{example}_ppo.yaml"


def threshold(example: str) -> float:
    return THRESHOLDS[example.split("_")[0]]


def run_one(example: str, seed: int, out_root: Path, extra: list[str]) -> dict:
    run_dir = out_root / f"{example}-s{seed}"
    cfg = config_path(example)
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", str(cfg), "--seed", str(seed), "--run-dir", str(run_dir),
           "-o", "logging.progress=false", *sum((["-o", e] for e in extra), [])]
    t0 = time.time()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    total = time.time() - t0
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    ev = subprocess.run([sys.executable, "-m", "kilorl.cli.main", "eval", str(run_dir), "--episodes", "20", "--json"],
                        check=True, capture_output=True, text=True)
    score = json.loads(ev.stdout.strip().splitlines()[-1])
    last = rows[-1]
    return {
        "example": example, "seed": seed, "env_steps": last["env_steps"],
        "train_return": last.get("episode_return_mean"), "eval_mean": score["episode_return_mean"],
        "eval_std": score["episode_return_std"], "train_time": last["train_time"], "startup_s": last["startup_s"],
        "process_s": total,
        "passed": score["episode_return_mean"] >= threshold(example)
        and last["train_time"] <= TRAIN_TIME_LIMIT_S.get(example.split("_")[0], float("inf")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", default="cartpole,lunarlander,pendulum")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--out", default="runs/examples-check")
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--json-out")
    args = ap.parse_args()
    results = []
    for ex in args.examples.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            r = run_one(ex, seed, Path(args.out), args.override)
            results.append(r)
            print(json.dumps(r), flush=True)
    print("\n| example | seed | env steps | train return (last 20) | eval (20 ep, deterministic) | train time s "
          "| start-up s | threshold met |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['example']} | {r['seed']} | {r['env_steps']:,} | {r['train_return']:.1f} "
              f"| {r['eval_mean']:.1f} ± {r['eval_std']:.1f} | {r['train_time']:.0f} | {r['startup_s']:.1f} "
              f"| {'yes' if r['passed'] else 'NO'} (≥ {threshold(r['example']):g}) |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
