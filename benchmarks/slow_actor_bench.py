"""One env runner slowed on purpose: what it costs the others on the ``queue`` and ``on_policy`` data paths.

Three arms, alternated round by round on one Ray instance so that machine load falls on each alike:

- ``queue``: IMPALA on the as-completed path, every runner at full speed;
- ``queue_slow``: the same, one runner's envs sleeping ``--step-ms`` a step (``SlowInOneProcess``);
- ``on_policy_slow``: A2C (lock-step ``on_policy``) with the same slowed runner and the same rollout shape.

Per arm, the medians over rounds of: the fast runners' rollouts/s (each runner's rollouts over the loop's
wall time), env frames/s, and the batch lag (min/mean/max of ``policy_lag`` over the run). The issue's goals:
fast runners' rollouts/s in ``queue_slow`` within 10 % of ``queue``; ``queue_slow`` frames/s >= 1.5x
``on_policy_slow``'s. On a machine with fewer cores than processes a sleeping runner frees CPU for
the others (they speed up); ``--spin`` makes the slowed runner busy-wait instead, so it keeps its CPU
share and the ratio shows only what the data path makes the others wait.

    PYTHONPATH=. nice -n 19 python benchmarks/slow_actor_bench.py --rounds 3 --out benchmarks/results/slow_actor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ARMS = ("queue", "queue_slow", "on_policy_slow")


def arm_config(arm: str, marker: Path, args: argparse.Namespace) -> Any:
    from kilorl.config import config_from_dict

    slow = arm.endswith("_slow")
    kwargs = {"marker": str(marker), "step_s": args.step_ms / 1e3, "spin": args.spin}
    env = {"id": "tests.trainer.broken_env:SlowInOneProcess", "kwargs": kwargs} if slow else {"id": "CartPole-v1"}
    algo: dict[str, Any] = {"rollout_length": args.rollout_length}
    if arm.startswith("queue"):
        algo |= {"name": "impala", "queue": {"rollouts_per_batch": args.per_batch, "max_queued_rollouts": 4 * args.per_batch}}
    else:
        algo |= {"name": "a2c"}
    return config_from_dict({
        "env": env, "algo": algo, "model": {"hidden_sizes": [64, 64]},
        "parallelism": {"actor": args.actors, "envs_per_actor": args.envs},
        "train": {"total_env_steps": args.rollouts * args.rollout_length * args.envs, "seed": 1},
        "logging": {"progress": False, "tensorboard": False, "report_every_s": 0.0},
        "resources": {"learner": {"gpus": 0, "cpus": 1, "memory_gb": 0.25}, "actor": {"cpus": 1, "memory_gb": 0.25},
                      "parameter_server": {"cpus": 0.1, "memory_gb": 0.1}},
    })


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from kilorl.algos.registry import get as get_algorithm
    from kilorl.core import step_lags
    from kilorl.trainer import Cluster
    from kilorl.trainer.data_path import make_data_path
    from kilorl.trainer.session import RoleSession

    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "slow"
        cfg = arm_config(arm, marker, args)
        with RoleSession(cfg, Cluster()) as roles:
            pids = ray.get([a.pid.remote() for a in roles.actors])
            loop = make_data_path(get_algorithm(cfg.algo.name).data_path, cfg, roles, 0, 0)
            t0 = time.perf_counter()
            results = list(loop)
            wall = time.perf_counter() - t0
        slow = pids.index(int(marker.read_text())) if marker.exists() else None
    counts = [0] * args.actors
    lags: list[int] = []
    for it in results:
        for info in it.infos:
            counts[info["actor"]] += 1
            lags.extend(step_lags(info, it.iteration - 1))
    fast = [n / wall for j, n in enumerate(counts) if j != slow]
    return {"arm": arm, "wall_s": wall, "frames_per_s": results[-1].env_steps / wall, "rollouts": counts, "slow_runner": slow,
            "fast_rollouts_per_s": statistics.mean(fast), "slow_rollouts_per_s": None if slow is None else counts[slow] / wall,
            "lag_min": min(lags), "lag_mean": statistics.mean(lags), "lag_max": max(lags)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    med = {arm: {k: statistics.median(r[k] for r in runs if r["arm"] == arm)
                 for k in ("frames_per_s", "fast_rollouts_per_s", "lag_mean", "lag_max")}
           for arm in ARMS if any(r["arm"] == arm for r in runs)}
    paired = [s["fast_rollouts_per_s"] / n["fast_rollouts_per_s"] for n, s in zip(
        (r for r in runs if r["arm"] == "queue"), (r for r in runs if r["arm"] == "queue_slow"))]
    out: dict[str, Any] = {"medians": med, "fast_runners_slow_over_none_paired": paired}
    if "queue" in med and "queue_slow" in med:
        out["fast_runners_slow_over_none"] = med["queue_slow"]["fast_rollouts_per_s"] / med["queue"]["fast_rollouts_per_s"]
    if "queue_slow" in med and "on_policy_slow" in med:
        out["queue_over_on_policy_with_slow_runner"] = med["queue_slow"]["frames_per_s"] / med["on_policy_slow"]["frames_per_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--actors", type=int, default=3)
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--rollout-length", type=int, default=32)
    p.add_argument("--rollouts", type=int, default=240, help="rollouts per run (the env-step budget)")
    p.add_argument("--per-batch", type=int, default=2, help="queue: rollouts_per_batch")
    p.add_argument("--step-ms", type=float, default=5.0, help="the slowed runner's sleep per env step")
    p.add_argument("--spin", action="store_true",
                   help="the slowed runner busy-waits instead of sleeping: it keeps its CPU share (fewer cores than processes)")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated, from: " + ", ".join(ARMS))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    import ray

    ray.init(num_cpus=args.actors + 2, include_dashboard=False, log_to_driver=False)
    runs = []
    for r in range(args.rounds):
        for arm in args.arms.split(","):
            runs.append(run_arm(arm, args))
            print(json.dumps({"round": r, **runs[-1]}), flush=True)
            if args.out:  # every run as it ends: a run cut short still leaves the ones before it
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "runs": runs}, indent=1))
    out = {"args": vars(args) | {"out": str(args.out)}, "runs": runs, **summarize(runs)}
    print(json.dumps({k: v for k, v in out.items() if k not in ("args", "runs")}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
