"""CPU cost of one PPO update and one actor rollout, optionally A/B against another checkout.

Both run in-process (no Ray): the update is the CartPole example's (20 epochs over a random
``[64, 8]`` rollout, one minibatch), the rollout is one ``collect`` of 64 steps x 8 CartPole
envs from an in-memory parameter store. Each measurement is a fresh subprocess that reports
the minimum over ``--calls`` calls (after warm-up): on a shared machine the minimum is the
least noisy estimate of the CPU a call needs. With ``--baseline DIR`` (a checkout, e.g.
``git worktree add /tmp/base HEAD~1``) the two trees alternate ``--pairs`` times, so load
from other jobs hits both.

    python benchmarks/learner_step_bench.py [--baseline /tmp/base] [--pairs 4] [--calls 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from kilorl.algos import get, keys
from kilorl.config import load_config
from kilorl.core import Rollout
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.grad_comm import make_grad_comm
from kilorl.algos.api import RolloutBatch
from kilorl.roles.learner import build_algorithm
from kilorl.roles.parameter_store import InMemoryParameterStore

calls = int(sys.argv[2])
cfg = load_config(sys.argv[1], [])
learner = build_algorithm(cfg, make_grad_comm(cfg, 1))
T, N = cfg.algo.rollout_length, cfg.parallelism.envs_per_actor
rng = np.random.default_rng(0)
steps = {keys.OBS: rng.standard_normal((T, N, 4)).astype(np.float32),
         keys.ACTIONS: rng.integers(0, 2, (T, N)).astype(np.int64), keys.REWARDS: np.ones((T, N), np.float32),
         keys.TERMINATED: rng.random((T, N)) < 0.02, keys.TRUNCATED: np.zeros((T, N), bool),
         keys.VALUES: rng.standard_normal((T, N)).astype(np.float32), keys.LOGP: np.full((T, N), -0.69, np.float32)}
rollout = Rollout(steps=steps, last={keys.LAST_VALUES: np.zeros(N, np.float32)}, moments={}, version=0)
store = InMemoryParameterStore()
store.publish(keys.POLICY, 0, learner.weights())
actor = EnvRunner(cfg, store, 0, 1)

def best(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return min(times) * 1e3

batch = RolloutBatch(rollout)
print(json.dumps({"update_ms": best(lambda: learner.update(batch, 1000)), "collect_ms": best(lambda: actor.collect(0))}))
"""


def measure(tree: Path, config: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(config), str(calls)], cwd=tree, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, help="another checkout to alternate with (A/B)")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--config", type=Path, default=REPO / "examples" / "cartpole_ppo.yaml")
    args = p.parse_args(argv)
    trees = {"this tree": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.pairs):
        for name, tree in trees.items():
            rows[name].append(measure(tree, args.config.resolve(), args.calls))
    print("| tree | PPO update, min (ms): range / median | actor collect, min (ms): range / median |")
    print("|---|---|---|")
    for name, rs in rows.items():
        cells = []
        for k in ("update_ms", "collect_ms"):
            xs = [r[k] for r in rs]
            cells.append(f"{min(xs):.1f}-{max(xs):.1f} / {statistics.median(xs):.1f}")
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
