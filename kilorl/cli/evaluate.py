"""``kilorl eval``: run a trained policy for whole episodes."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="RUN_DIR|CHECKPOINT")
    p.add_argument("--checkpoint", metavar="best|latest|step_N",
                   help="which checkpoint of RUN_DIR: the best evaluated (evaluation.keep_best), the newest, or the "
                        "one at N env steps (default: best when the run kept one, else latest)")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    p.add_argument("--seed", type=int, default=1_000_000, help="seed of the first episode (others follow)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from kilorl.trainer.evaluate import evaluate

    if args.episodes < 1:
        print("error: --episodes must be >= 1", file=sys.stderr)
        return 2
    try:
        res = evaluate(args.path, args.episodes, deterministic=not args.stochastic, seed=args.seed,
                       checkpoint=args.checkpoint)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    per_policy = res.policy_return_means or {}
    if args.json:
        print(json.dumps({"episode_return_mean": res.episode_return_mean, "episode_return_std": res.episode_return_std,
                          "episodes": res.episodes, "checkpoint": res.checkpoint, "env_steps": res.env_steps,
                          **({"policy_return_mean": per_policy} if per_policy else {})}))
    else:
        print(f"{res.episodes} episodes: return {res.episode_return_mean:.2f} ± {res.episode_return_std:.2f} "
              f"({'stochastic' if args.stochastic else 'deterministic'}, checkpoint {res.checkpoint})")
        for policy, mean in per_policy.items():
            print(f"  policy {policy}: return {mean:.2f} (its agents' sum)")
    return 0
