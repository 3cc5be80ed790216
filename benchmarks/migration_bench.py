"""Time from a migration decision to the replacement serving, on a 2-raylet cluster.

Runs ``tests/trainer/migration_check.py`` (CartPole, 2 actors, 1 learner; actor 0 and
learner 0 leak 24 MiB/s by fault injection) ``--runs`` times, each in a fresh process
with a fresh ``ray.cluster_utils.Cluster``, and prints per role the decision -> serving
seconds of every run and their median, the level the leaking role had reached against
its limit, and whether env-step accounting was exact. ``--check store`` runs it with
``--store``: the store worker of rank 1 leaks instead, and
"serving" is its hand-off done and the newest policy read whole without it.

    PYTHONPATH=. python benchmarks/migration_bench.py --runs 3
    PYTHONPATH=. python benchmarks/migration_bench.py --runs 3 --check store
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


CHECKS = {"roles": [], "store": ["--store"]}


def one_run(run_dir: Path, check: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.trainer.migration_check", *CHECKS[check], str(run_dir)],
                         capture_output=True,
                         text=True, timeout=600, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--check", choices=sorted(CHECKS), default="roles", help="actor and learner, or a store worker")
    args = ap.parse_args()
    serving: dict[str, list[float]] = {"actor": [], "learner": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs):
            r = one_run(Path(tmp) / f"run{k}", args.check)
            exact = r["env_steps"] == r["total_env_steps"] == r["rows"][-1]["iteration"] * r["batch"]
            for rec in r["records"]:
                serving.setdefault(rec["role"], []).append(rec["serving_s"] or float("nan"))
                print(f"run {k}: {rec['role']}[{rec['rank']}] {rec['outcome']} {rec['from_node']} -> {rec['to_node']} "
                      f"in {rec['serving_s']:.2f} s at iteration {rec['iteration']}; level "
                      f"{rec['level_bytes'] / 2**30:.2f} GiB of limit {rec['limit_bytes'] / 2**30:.2f} GiB; "
                      f"exact env steps: {exact} ({r['env_steps']})", flush=True)
    for role, values in serving.items():
        if values:
            print(f"{role}: decision -> serving median {statistics.median(values):.2f} s over {len(values)} run(s) "
                  f"(min {min(values):.2f}, max {max(values):.2f})")


if __name__ == "__main__":
    main()
