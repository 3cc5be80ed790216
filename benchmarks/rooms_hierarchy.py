"""Two levels against flat PPO on the sparse rooms task (issue 35, acceptance item 3).

    nice -n 19 python benchmarks/rooms_hierarchy.py --seeds 1 --out benchmarks/results/rooms_hierarchy.json

Per seed, one after the other: ``kilorl train examples/rooms_hierarchical.yaml`` and
``kilorl train examples/rooms_ppo.yaml`` with the same ``train.total_env_steps`` (the
hierarchical run's env steps count its decision steps too, so it moves less), then ``kilorl
eval RUN --episodes 100`` of each run's result, stochastic and deterministic, on seeds
from 1,000,000 (training drew its episodes from the seed's own stream). The reward is 1 at
the goal and 0 otherwise, so a mean return (the high policy's for the two levels, the run's
for flat PPO) is the fraction of episodes that reached the goal. Both examples evaluate 50
episodes every 20K env steps during training (seeds from 2,000,000) and keep the best: that is
the run's result, the checkpoint ``kilorl eval RUN`` plays (``best_eval`` and ``best_step`` in a
row: its evaluation during training). ``--rooms N``: an N x N grid of rooms instead of the
examples' 3 x 3.

``--uniform-high RUN_DIR``: instead, play a two-level run's final checkpoint with the high
level's action head zeroed (options drawn uniformly, the low level as trained), 100 stochastic
episodes: how much of the success is the high level's choice of options.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KILORL = [sys.executable, "-m", "kilorl.cli.main"]
RUNS = {"hierarchical": "examples/rooms_hierarchical.yaml", "flat_ppo": "examples/rooms_ppo.yaml"}
EPISODES = 100


def success(run_dir: Path, stochastic: bool) -> float:
    """The fraction of ``EPISODES`` evaluation episodes that reached the goal."""
    cmd = [*KILORL, "eval", str(run_dir), "--episodes", str(EPISODES), "--json"] + (["--stochastic"] * stochastic)
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout.splitlines()[-1])
    per_policy = out.get("policy_return_mean")
    return float(per_policy["high"] if per_policy else out["episode_return_mean"])


def best_eval(run_dir: Path) -> dict[str, float | None]:
    """The kept policy's evaluation during training, and the run's env steps at its end."""
    from kilorl.trainer.metrics import read_metrics

    rows = read_metrics(run_dir)
    evals = [r for r in rows if "eval_return_mean" in r]
    best = max(evals, key=lambda r: (r["eval_return_mean"], r["env_steps"]), default=None)
    return {"best_eval": best and best["eval_return_mean"], "best_step": best and best["env_steps"],
            "env_steps": rows[-1]["env_steps"] if rows else None}


def uniform_high(run_dir: Path) -> float:
    """Success of ``run_dir``'s final checkpoint with uniform options (``--uniform-high``)."""
    import numpy as np
    import torch

    from kilorl.config import config_from_dict
    from kilorl.roles.agent_evaluation import AgentEpisodeRunner
    from kilorl.trainer.checkpoint import load_checkpoint
    from kilorl.trainer.evaluate import resolve_checkpoint

    state, meta = load_checkpoint(resolve_checkpoint(run_dir))
    states = state["policies"]
    model = states["high"]["model"]
    for key in ("policy_head.weight", "policy_head.bias"):
        model[key] = torch.zeros_like(torch.as_tensor(model[key]))
    played = AgentEpisodeRunner(config_from_dict(meta["config"])).play(states, EPISODES, 1_000_000, deterministic=False)
    return float(np.mean(played.policy_returns["high"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1", help="comma-separated seeds")
    p.add_argument("--steps", type=int, default=None, help="train.total_env_steps (default: the examples')")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    p.add_argument("--rooms", type=int, default=None, help="an N x N grid of rooms (default: the examples' 3)")
    p.add_argument("--runs-dir", default="/tmp/rooms_hierarchy_runs")
    p.add_argument("--out", default=None)
    p.add_argument("--uniform-high", type=Path, default=None, metavar="RUN_DIR")
    args = p.parse_args()
    if args.uniform_high is not None:
        print(json.dumps({"run": str(args.uniform_high), "success_uniform_high": uniform_high(args.uniform_high)}))
        return
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in args.runs.split(","):
            example = RUNS[name]
            run_dir = Path(args.runs_dir) / f"{name}-rooms{args.rooms or 3}-seed{seed}"
            cmd = [*KILORL, "train", example, "--run-dir", str(run_dir), "--seed", str(seed)]
            if args.steps is not None:
                cmd += ["-o", f"train.total_env_steps={args.steps}"]
            if args.rooms is not None:
                rooms = "env.kwargs.env_kwargs.rooms" if name == "hierarchical" else "env.kwargs.rooms"
                cmd += ["-o", f"{rooms}={args.rooms}"]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=REPO, env=os.environ | {"PYTHONUNBUFFERED": "1"},
                           stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            row = {"run": name, "rooms": args.rooms or 3, "seed": seed, "wall_s": round(wall, 1), **best_eval(run_dir),
                   "success_stochastic": success(run_dir, True), "success_deterministic": success(run_dir, False),
                   "load": os.getloadavg()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
