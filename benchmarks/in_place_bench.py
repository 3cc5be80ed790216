"""Restart in place on one machine: a leaking actor and learner replaced before their limit.

For each rate and run: ``kilorl train examples/cartpole_ppo.yaml`` (embedded Ray, one node)
with the monitor on (pushes every second, the default detector with its steep-leak test),
``memory_budget_bytes`` 2 GiB for the actor and the learner, ``migrate_before_s: 600``,
and actor 0 and learner 0 leaking RATE MiB/s from 5 s after they start reporting
(``monitor.inject_leaks``). No other node exists, so each is restarted in place. Then
``kilorl eval RUN_DIR --episodes 20``. Per run it prints the exit code, the env steps
against the budget and the iterations (exact accounting: steps = iterations x batch), each
migration record (outcome, the leaking role's RSS at the decision against its limit, the
forecast, decision -> serving) and the evaluation against CartPole's 475.

    PYTHONPATH=. python benchmarks/in_place_bench.py --rates 20,50,100 --runs 3

``--example examples/cartpole_impala.yaml`` runs the same on the ``queue`` data path; there the
accounting check is env steps = rollouts trained (the rows' ``rollouts_actor{j}``) x rollout size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
BUDGET = 2 * 2**30
THRESHOLD = 475.0
MAX_CONCURRENT = 2
"""Both leaking roles may be decided in one round (with 1, the actor waits behind the learner's restart)."""


def overrides(rate_mib_s: float, seed: int, roles: tuple[str, ...] = ("actor", "learner")) -> list[str]:
    leaks = ", ".join(f"{{role: {r}, rank: 0, bytes_per_s: {int(rate_mib_s * MiB)}, start_after_s: 5}}"
                      for r in roles)
    return ["logging.progress=false", "logging.tensorboard=false", f"train.seed={seed}",
            "monitor.prometheus.enabled=true", "monitor.prometheus.port=0",
            f"monitor.memory_budget_bytes={{actor: {BUDGET}, learner: {BUDGET}}}",
            "monitor.migration.migrate_before_s=600", f"monitor.migration.max_concurrent={MAX_CONCURRENT}",
            f"monitor.inject_leaks=[{leaks}]"]


def one_run(rate: float, seed: int, root: Path, roles: tuple[str, ...], example: str = "examples/cartpole_ppo.yaml",
            extra: tuple[str, ...] = ()) -> dict:
    run = root / f"rate{rate:g}-s{seed}-{'-'.join(roles)}"
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", example, "--run-dir", str(run),
           *sum((["-o", o] for o in [*overrides(rate, seed, roles), *extra]), [])]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    wall = time.time() - t0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    path = run / "monitor" / "migrations.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    last = rows[-1] if rows else {}
    res = {"rate_mib_s": rate, "seed": seed, "leaking": list(roles), "exit": out.returncode, "wall_s": round(wall, 1),
           "last_line": out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:],
           "env_steps": last.get("env_steps"), "iteration": last.get("iteration"),
           "lost_rollouts": last.get("lost_rollouts"),
           "rollouts_trained": sum(v for k, v in last.items() if k.startswith("rollouts_actor")) or None,
           "records": [{"role": r["role"], "outcome": r["outcome"], "level_gib": round(r["level_bytes"] / 2**30, 3),
                        "limit_gib": round((r["limit_bytes"] or 0) / 2**30, 3), "forecast": r["reason"].split(", ")[-1],
                        "serving_s": None if r["serving_s"] is None else round(r["serving_s"], 2)} for r in records]}
    if out.returncode == 0:
        ev = subprocess.run([sys.executable, "-m", "kilorl.cli.main", "eval", str(run), "--episodes", "20", "--json"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
        res["eval_mean"] = json.loads(ev.stdout.strip().splitlines()[-1])["episode_return_mean"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="20,50,100", help="leak rates in MiB/s")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="run directories go here (default: a temporary directory)")
    ap.add_argument("--roles", default="actor,learner", help="the roles that leak in each run (default: both at once)")
    ap.add_argument("--example", default="examples/cartpole_ppo.yaml")
    ap.add_argument("-o", dest="extra", action="append", default=[], help="further config overrides")
    args = ap.parse_args()
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="in-place-"))
    for rate in (float(r) for r in args.rates.split(",")):
        for seed in range(1, args.runs + 1):
            leaking = tuple(args.roles.split(","))
            r = one_run(rate, seed, root, leaking, args.example, tuple(args.extra))
            roles = {x["role"]: x for x in r["records"]}
            r["replaced_before_limit"] = (sorted(roles) == sorted(leaking)
                                          and all(x["outcome"] == "restarted_in_place" and x["level_gib"] < x["limit_gib"]
                                                  for x in roles.values()))
            r["eval_met"] = r.get("eval_mean") is not None and r["eval_mean"] >= THRESHOLD
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
