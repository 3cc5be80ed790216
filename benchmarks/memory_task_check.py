"""A memory task, recurrent against feed-forward: the same config with and without
``model.recurrent``, trained in this process without Ray (one env runner, one learner, the
roles' own code), then evaluated greedily by the learner's ``EpisodeRunner``.

For a machine where Ray's start-up is unreliable (on a loaded 2-core box Ray's raylet must
register within a fixed 30 s): the algorithm, model and env runner are the ones ``kilorl
train`` runs; the process layout is not.

    python benchmarks/memory_task_check.py examples/repeat_previous_lstm.yaml --env-steps 61440 --seed 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml

from kilorl.config import config_from_dict
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore


def train(data: dict, env_steps: int, episodes: int) -> dict[str, float]:
    """Train until ``env_steps``; the last 40 training episodes' mean and a greedy evaluation."""
    cfg = config_from_dict(data)
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    runner = EnvRunner(cfg, store, 0, seed=cfg.train.seed)
    returns: list[float] = []
    steps, version, start = 0, 0, time.perf_counter()
    while steps < env_steps:
        rollout, info = runner.collect(version)
        returns += info["episode_returns"]
        steps += rollout.env_steps
        version += 1
        learner.update(version, steps, rollout)
    seconds = time.perf_counter() - start
    evaluation = learner.evaluate(episodes, seed=10_000 + cfg.train.seed)
    return {"env_steps": steps, "seconds": seconds, "train_return_last40": statistics.mean(returns[-40:]),
            "eval_return_mean": statistics.mean(evaluation), "eval_return_std": statistics.pstdev(evaluation)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path)
    p.add_argument("--env-steps", type=int, default=61_440)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--sides", default="recurrent,feed-forward")
    args = p.parse_args()
    torch.set_num_threads(1)
    for side in args.sides.split(","):
        data = yaml.safe_load(args.config.read_text())
        data.setdefault("train", {}).update(seed=args.seed, torch_threads=1)
        data["train"]["total_env_steps"] = max(args.env_steps, data["train"].get("total_env_steps", 0))
        if side == "feed-forward":
            data["model"]["recurrent"] = None
        print(json.dumps({"side": side, "seed": args.seed, **train(data, args.env_steps, args.episodes)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
