"""Sustained env frames/s and policy lag: kiloRL APPO (``queue`` data path) against Sample Factory APPO
and RLlib APPO (``--rllib-python``, its own venv; ``benchmarks/rllib_appo_worker.py``).

Same shape on every side: CartPole-v1, 2 env workers x 8 envs, 32-step rollouts, 512-frame learner
batches, one learner, CPU. kiloRL runs ``kilorl train examples/cartpole_appo.yaml`` with those
overrides; Sample Factory runs its ``sf_examples.train_gym_env`` (through ``sf_train_gym.py``) in its
own virtual environment (``--sf-python``, e.g. /work/sfvenv/bin/python; ``pip install torch==2.13.0``
there before ``sample-factory``); RLlib likewise (``--rllib-python``, e.g. /work/rllibvenv/bin/python
with ``ray[rllib]`` at main's Ray version). Runs alternate (kiloRL, SF, RLlib, kiloRL, ...) so load
falls on every side alike.

Sustained frames/s leaves start-up out on both sides: kiloRL, env steps between its first and last
metric rows over the ``train_time`` between them; Sample Factory, "Total num frames" between its
first non-zero and last ``Fps is`` log lines over their timestamps. Lag: kiloRL's per-row
``policy_lag_min`` / ``policy_lag`` / ``policy_lag_max`` (min, mean, max over rows); Sample
Factory's ``Policy #0 lag: (min, avg, max)`` lines likewise. Reported: medians over runs and the
kiloRL/SF frames/s ratio of the medians. kiloRL's runs also report the env runners' stage shares
(the rows' ``collect_share_*``, averaged) and every run the load average before and after it.

    nice -n 19 python benchmarks/throughput_bench.py --runs 3 --frames 200000 --sf-python /work/sfvenv/bin/python \\
        --out benchmarks/results/throughput.json

``--env LunarLander-v3 --sf-env LunarLander-v2`` runs the other environment (Box2D needed on both
sides; Sample Factory 2.1.1 pins gymnasium 0.29, which has LunarLander-v2 only; SF is started through
``benchmarks/sf_train_gym.py``, which registers any gymnasium id);
``--env-groups 2 --vector-env subprocesses`` gives kiloRL's runners double-buffered sampling;
``--sweep 1,2,4`` runs only kiloRL, once per env-runner count, for the scaling table;
``--refresh-every none,8`` runs kiloRL once per value of ``algo.queue.refresh_every_steps`` (runners
taking newer versions mid-rollout, lag per step), alternated with the others, as sides
``kilorl`` (none) and ``kilorl_refresh8``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SF_FPS = re.compile(r"\[(\d{4}-\S+ \S+)\]\[\d+\] Fps is .*Total num frames: (\d+)\.")
SF_LAG = re.compile(r"Policy #0 lag: \(min: ([-\d.]+), avg: ([-\d.]+), max: ([-\d.]+)\)")


def load() -> float:
    """The 1-minute load average: how busy the machine was."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def kilorl_run(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    refresh = "null" if args.refresh in (None, "none") else args.refresh
    overrides = [f"train.total_env_steps={args.frames}", f"algo.queue.refresh_every_steps={refresh}",
                 f"parallelism.actor={args.workers}",
                 f"env.id={args.env}", f"parallelism.env_groups={args.env_groups}",
                 f"parallelism.vector_env={args.vector_env}",
                 f"parallelism.envs_per_actor={args.envs}", "algo.rollout_length=32", "algo.queue.rollouts_per_batch=2",
                 "evaluation.every_env_steps=null", "evaluation.keep_best=false", "logging.report_every_s=1.0",
                 "logging.progress=false", "logging.tensorboard=false", "checkpoint.every_env_steps=null"]
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", str(REPO / "examples/cartpole_appo.yaml"),
           "--run-dir", str(run_dir)] + [x for o in overrides for x in ("-o", o)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "policy_lag" in r]
    first, last = rows[0], rows[-1]
    shares = sorted({k for r in rows for k in r if k.startswith("collect_share_")})
    return {"frames_per_s": (last["env_steps"] - first["env_steps"]) / (last["train_time"] - first["train_time"]),
            "lag_min": min(r["policy_lag_min"] for r in rows), "lag_mean": statistics.mean(r["policy_lag"] for r in rows),
            "lag_max": max(r["policy_lag_max"] for r in rows), "frames": last["env_steps"],
            **{k: statistics.mean(r[k] for r in rows if k in r) for k in shares}}


def sf_run(args: argparse.Namespace, train_dir: Path) -> dict[str, Any]:
    cmd = [args.sf_python, str(REPO / "benchmarks/sf_train_gym.py"), "--algo=APPO", f"--env={args.sf_env or args.env}",
           "--use_rnn=False",
           f"--num_workers={args.workers}", f"--num_envs_per_worker={args.envs}", "--rollout=32", "--batch_size=512",
           "--device=cpu", f"--train_for_env_steps={args.frames}", "--experiment=bench", f"--train_dir={train_dir}",
           "--save_every_sec=100000", "--with_wandb=False", "--seed=1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    log = out.stdout + out.stderr
    points, lags = [], []
    for line in log.splitlines():
        m = SF_FPS.search(line)
        if m and int(m.group(2)) > 0:  # the line before the first batch has no lag yet (-1)
            points.append((datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(m.group(2))))
            if lag := SF_LAG.search(line):
                lags.append(tuple(float(g) for g in lag.groups()))
    if len(points) < 2:
        return {"error": f"rc {out.returncode}; {len(points)} Fps lines; " + log[-2000:]}
    (t0, f0), (t1, f1) = points[0], points[-1]
    return {"frames_per_s": (f1 - f0) / (t1 - t0), "lag_min": min(x[0] for x in lags) if lags else None,
            "lag_mean": statistics.mean(x[1] for x in lags) if lags else None,
            "lag_max": max(x[2] for x in lags) if lags else None, "frames": f1}


def rllib_run(args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    """RLlib APPO through ``benchmarks/rllib_appo_worker.py`` in RLlib's own venv; its last line holds
    the result (RLlib reports no per-batch lag: the lag fields are None, see that script)."""
    cmd = [args.rllib_python, str(REPO / "benchmarks/rllib_appo_worker.py"), f"--env={args.env}",
           f"--workers={args.workers}", f"--envs={args.envs}", f"--frames={args.frames}"]
    # its own Ray instance; a short temp root (Ray's socket paths must stay under 107 characters)
    env = {**os.environ, "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp/ray") + "_rllib", "RAY_AUTH_MODE": "disabled"}
    work_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=work_dir)
    last = next((json.loads(x) for x in reversed(out.stdout.splitlines()) if x.startswith('{"result"')), None)
    if out.returncode != 0 or last is None:
        return {"error": f"rc {out.returncode}; " + (out.stdout + out.stderr)[-2000:]}
    return last["result"]


def _median(values: list[float]) -> float | None:
    """The median, or None where a side reports no such figure (RLlib's lag)."""
    return statistics.median(values) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per side, alternated")
    p.add_argument("--frames", type=int, default=200_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--sf-python", default="/work/sfvenv/bin/python")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--rllib-python", help="RLlib's venv python (a side `rllib` alternated with the others); "
                   "none: no RLlib side")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--sf-env", help="Sample Factory's env id when its gymnasium lacks --env's (its 0.29 has "
                   "LunarLander-v2, not -v3: same physics and rewards; v3 resets wind state per episode and fixed a "
                   "determinism bug and widened the declared observation bounds); default: --env")
    p.add_argument("--env-groups", type=int, default=1, help="kiloRL's parallelism.env_groups")
    p.add_argument("--vector-env", default="in_process", choices=["in_process", "subprocesses"])
    p.add_argument("--sweep", help="kiloRL only: env-runner counts, e.g. 1,2,4 (each --runs times)")
    p.add_argument("--refresh-every", default="none",
                   help="kiloRL's algo.queue.refresh_every_steps, one side per value, e.g. none,8")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    runs: list[dict[str, Any]] = []
    refreshes = args.refresh_every.split(",")
    kilorl_sides = [("kilorl" if r == "none" else f"kilorl_refresh{r}", kilorl_run, args.workers, r) for r in refreshes]
    plan = [(f"kilorl_{w}", kilorl_run, int(w), refreshes[0]) for w in args.sweep.split(",")] if args.sweep else \
        kilorl_sides + [("sample_factory", sf_run, args.workers, None)] + \
        ([("rllib", rllib_run, args.workers, None)] if args.rllib_python else [])
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for side, fn, workers, refresh in plan:
                t0, load0 = time.time(), load()
                r = {"side": side, "run": i, "workers": workers,
                     **fn(argparse.Namespace(**(vars(args) | {"workers": workers, "refresh": refresh})),
                          Path(tmp) / f"{side}{i}"),
                     "wall_s": time.time() - t0, "load_before": load0, "load_after": load()}
                runs.append(r)
                shown = {k: (v[-300:] if k == "error" else v) for k, v in r.items()}
                print(json.dumps(shown), flush=True)
    med = {side: {k: _median([r[k] for r in runs if r["side"] == side and r.get(k) is not None])
                  for k in ("frames_per_s", "lag_mean", "lag_max")}
           for side in dict.fromkeys(side for side, *_ in plan)
           if any(r["side"] == side and "error" not in r for r in runs)}
    summary = {"medians": med}
    for side in med:
        for peer, tag in (("sample_factory", "sf"), ("rllib", "rllib")):
            if side.startswith("kilorl") and peer in med:
                summary[f"{side}_over_{tag}_frames_per_s"] = med[side]["frames_per_s"] / med[peer]["frames_per_s"]
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "runs": runs, **summary}, indent=1))


if __name__ == "__main__":
    main()
