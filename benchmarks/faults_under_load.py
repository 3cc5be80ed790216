"""Faults under load: kill -9 of an actor, a learner, a store worker and the mesh head's store
worker mid-run, each repeated, with CPU-bound burners beside the runs.

Each run is a fresh process (its own Ray), so one run's failure cannot leak into the next.
A run *finishes* when it reaches its env-step budget; its *accounting is exact* when every
counted batch holds exactly one batch of env steps (a rollout lost with its process is
collected again and never counted) and the run ends at exactly the budget.

- ``actor``: a 2-actor CartPole run (``RoleSession`` + ``OnPolicyLoop``); actor 0 is
  SIGKILLed after iteration 3. Ray restarts it; the slot's rollout is collected again.
- ``learner``: ``Trainer.fit`` with a checkpoint every 1024 steps; the learner is SIGKILLed
  after the first checkpoint; the run restores it and goes on (rows must not be replayed
  before the checkpoint).
- ``store``: the node's store worker is SIGKILLed after iteration 3; its owner restarts it
  empty and the version is republished.
- ``head``: two raylets (``ray.cluster_utils.Cluster``), the mesh head's worker SIGKILLed
  after iteration 3 (``tests/trainer/head_recovery_check.py``).

    nice -n 19 python benchmarks/faults_under_load.py --reps 10 --burners 2 [--kinds actor,store]

Prints one JSON line per run and a summary: per kind, runs finished / runs, exact / runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINDS = ("actor", "learner", "store", "head")
TOTAL_STEPS = 2560
BATCH_STEPS = 256  # 2 actors x 4 envs x 32 steps (tests.conftest.tiny_config)


def burn(stop_at: float) -> None:
    """A CPU-bound process: pure Python arithmetic until ``stop_at``."""
    x = 0
    while time.time() < stop_at:
        for i in range(100_000):
            x = (x * 31 + i) % 1_000_003


def _exact(batch_steps: list[int], final: int) -> bool:
    return all(s == BATCH_STEPS for s in batch_steps) and final == TOTAL_STEPS


def run_loop_kill(kind: str) -> dict:
    """``actor`` or ``store``: kill -9 after iteration 3 of a local 2-actor run."""
    import ray

    from kilorl.trainer import Cluster
    from kilorl.trainer.loop import OnPolicyLoop
    from kilorl.trainer.session import RoleSession
    from tests.conftest import tiny_config

    cfg = tiny_config(parallelism={"actor": 2}, train={"total_env_steps": TOTAL_STEPS})
    with RoleSession(cfg, Cluster()) as roles:
        loop = OnPolicyLoop(cfg, roles, 0, 0)
        pid = ray.get(roles.actors[0].pid.remote()) if kind == "actor" else roles.fleet.pids()[0]
        steps, final = [], 0
        for it in loop:
            steps.append(sum(i["env_steps"] for i in it.infos))
            final = it.env_steps
            if it.iteration == 3:
                os.kill(pid, signal.SIGKILL)
        extra = {"lost_rollouts": loop.lost_rollouts, "republished": loop.republished}
        if kind == "store":
            extra["store_restarts"] = roles.fleet.restarts()
    return {"finished": final == TOTAL_STEPS, "exact": _exact(steps, final), "env_steps": final,
            "batch_steps": steps, **extra}


def run_learner_kill(run_dir: Path) -> dict:
    """kill -9 of the learner after the first checkpoint of a ``Trainer.fit`` run."""
    import threading
    import warnings

    from ray._private.state import actors

    from kilorl.trainer import Trainer
    from kilorl.trainer.checkpoint import latest_checkpoint
    from tests.conftest import tiny_config

    cfg = tiny_config(parallelism={"actor": 2}, train={"total_env_steps": TOTAL_STEPS},
                      checkpoint={"every_env_steps": 1024})
    out: dict = {}

    def fit() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out["result"] = Trainer(cfg, run_dir).fit()
            except Exception as err:  # noqa: BLE001 - reported as an unfinished run
                out["error"] = f"{type(err).__name__}: {err}"
        out["warnings"] = [str(w.message) for w in caught]

    t = threading.Thread(target=fit)
    t.start()
    killed = False
    while t.is_alive() and not killed:
        if latest_checkpoint(run_dir):
            pids = [a["Pid"] for a in actors().values()
                    if a["State"] == "ALIVE" and "LearnerProcess" in a["ActorClassName"]]
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed = True
        time.sleep(0.05)
    t.join()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    steps = [r["env_steps"] for r in rows if "env_steps" in r and "stopped" not in r]
    final = out["result"].env_steps if "result" in out else (steps[-1] if steps else 0)
    # rows up to the checkpoint are never replayed from zero; every row is a whole batch further on
    before = [s for s in steps if s <= 1024]
    exact = final == TOTAL_STEPS and before == list(range(BATCH_STEPS, 1025, BATCH_STEPS)) \
        and all(s % BATCH_STEPS == 0 for s in steps)
    return {"finished": final == TOTAL_STEPS, "exact": exact, "env_steps": final, "killed": killed,
            "restored": any("restoring" in w for w in out.get("warnings", [])), "error": out.get("error")}


def run_head_kill() -> dict:
    """The mesh head's worker of a two-raylet run killed after iteration 3."""
    got = subprocess.run([sys.executable, "-m", "tests.trainer.head_recovery_check"], capture_output=True,
                         text=True, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""}, timeout=900)
    if got.returncode != 0:
        return {"finished": False, "exact": False, "error": got.stderr.strip().splitlines()[-1:] or [""]}
    r = json.loads(got.stdout.strip().splitlines()[-1])
    steps = [row["steps"] for row in r["rows"]]
    final = sum(steps)
    return {"finished": final == TOTAL_STEPS, "exact": _exact(steps, final), "env_steps": final,
            "batch_steps": steps, "republished": r["republished"], "restarts": r["restarts"]}


def one(kind: str, run_dir: str) -> None:
    """A single run in this process; prints its JSON line."""
    t0 = time.monotonic()
    if kind in ("actor", "store"):
        out = run_loop_kill(kind)
    elif kind == "learner":
        out = run_learner_kill(Path(run_dir))
    else:
        out = run_head_kill()
    print(json.dumps({"kind": kind, "seconds": round(time.monotonic() - t0, 1), **out}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=10, help="runs per kind of kill")
    p.add_argument("--burners", type=int, default=2, help="CPU-bound processes beside the runs")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take before it counts as failed")
    p.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--run-dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one, args.run_dir)
        return
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"--kinds: unknown {unknown}; allowed: {', '.join(KINDS)}")
    stop_at = time.time() + 24 * 3600
    burners = [mp.Process(target=burn, args=(stop_at,), daemon=True) for _ in range(args.burners)]
    for b in burners:
        b.start()
    summary: dict[str, dict[str, int]] = {k: {"runs": 0, "finished": 0, "exact": 0} for k in kinds}
    try:
        for rep in range(args.reps):
            for kind in kinds:
                run_dir = f"/tmp/kilorl-faults-{os.getpid()}-{kind}-{rep}"
                try:
                    got = subprocess.run([sys.executable, __file__, "--one", kind, "--run-dir", run_dir],
                                         capture_output=True, text=True, cwd=REPO, timeout=args.timeout,
                                         env={**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": str(REPO)})
                    lines = [x for x in got.stdout.splitlines() if x.startswith('{"kind"')]
                    row = json.loads(lines[-1]) if lines else {
                        "kind": kind, "finished": False, "exact": False,
                        "error": (got.stderr.strip().splitlines() or ["no output"])[-1]}
                except subprocess.TimeoutExpired:
                    row = {"kind": kind, "finished": False, "exact": False, "error": f"over {args.timeout:g}s"}
                row["rep"] = rep
                print(json.dumps(row), flush=True)
                s = summary[kind]
                s["runs"] += 1
                s["finished"] += bool(row.get("finished"))
                s["exact"] += bool(row.get("exact"))
    finally:
        for b in burners:
            b.terminate()
    print(json.dumps({"summary": summary, "burners": args.burners}))
    for kind, s in summary.items():
        print(f"{kind:8s} finished {s['finished']}/{s['runs']}, exact env-step accounting {s['exact']}/{s['runs']}")


if __name__ == "__main__":
    main()
