"""Time to a rolling 475 on CartPole-v1: kiloRL IMPALA, APPO and PPO against Stable-Baselines3 PPO.

One run holds every side: for each seed the four sides run one after another, the order rotated
seed by seed so that load from other jobs falls on each alike. Each side is what
``benchmarks/ppo_vs_peers.py`` measures (and reuses its runners): a subprocess with a
wall-clock budget that stops itself when the mean return of its last 20 finished training
episodes first reaches 475; kiloRL sides run their example config (``examples/cartpole_impala.yaml``,
``cartpole_appo.yaml``, ``cartpole_ppo.yaml``) with ``train.stop_return``, SB3 runs PPO with
rl-zoo's hyperparameters. Reported per side: runs that reached it, median seconds to it
(excluding start-up, and including it), median env steps to it; a run that never reaches counts
as infinitely slow in the medians.

    RAY_TMPDIR=/tmp/ray33 nice -n 19 python benchmarks/time_to_475.py --seeds 1,2,3 --budget-s 600 \\
        --out benchmarks/results/time_to_475.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ppo_vs_peers import ENVS, REPO, RunResult, median_or_inf, run_kilorl, run_sb3  # noqa: E402

SIDES = {"IMPALA": "examples/cartpole_impala.yaml", "APPO": "examples/cartpole_appo.yaml",
         "kiloRL PPO": "examples/cartpole_ppo.yaml", "SB3 PPO": None}
"""Side -> the kiloRL example it trains (None: SB3)."""


def run_side(side: str, seed: int, budget_s: float, work: Path) -> RunResult:
    env = ENVS["cartpole"]
    example = SIDES[side]
    if example is None:
        return run_sb3(env, seed, budget_s, work / "sb3")
    overrides = ["evaluation.every_env_steps=null", "evaluation.keep_best=false", "checkpoint.every_env_steps=null"]
    result = run_kilorl(env, REPO / example, seed, budget_s, work / side.split()[0].lower(), overrides)
    result.framework = side
    return result


def summarize(results: list[RunResult]) -> dict[str, dict[str, float | int]]:
    out: dict[str, dict[str, float | int]] = {}
    for side in SIDES:
        mine = [r for r in results if r.framework == side or (side == "SB3 PPO" and r.framework == "SB3")]
        if mine:
            out[side] = {"reached": sum(r.reached for r in mine), "runs": len(mine),
                         "median_time_s": median_or_inf([r.time_s for r in mine]),
                         "median_time_incl_startup_s": median_or_inf([r.time_incl_startup_s for r in mine]),
                         "median_env_steps": median_or_inf([r.env_steps for r in mine])}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget of one run")
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated, from: " + ", ".join(SIDES))
    p.add_argument("--work", type=Path, default=Path("/tmp/time_to_475"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    sides = args.sides.split(",")
    unknown = [s for s in sides if s not in SIDES]
    if unknown:
        p.error(f"--sides: unknown {unknown}; known: {list(SIDES)}")
    results: list[RunResult] = []
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:  # the order rotated seed by seed
            load0, t0 = Path("/proc/loadavg").read_text().split()[0], time.time()
            results.append(run_side(side, seed, args.budget_s, args.work))
            print(json.dumps({**asdict(results[-1]), "framework": side, "load_before": float(load0),
                              "load_after": float(Path("/proc/loadavg").read_text().split()[0]),
                              "wall_s": time.time() - t0}), flush=True)
            if args.out:  # every run as it ends: a run cut short leaves the ones before it
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out), "work": str(args.work)},
                                                "runs": [asdict(r) for r in results], "summary": summarize(results)},
                                               indent=1, default=str))
    print(json.dumps(summarize(results), indent=1))


if __name__ == "__main__":
    main()
