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
    PYTHONPATH=. python benchmarks/in_place_bench.py --rates 100 --runs 3 --roles actor
    PYTHONPATH=. python benchmarks/in_place_bench.py --rates 0 --runs 1 --roles none   # the same run, no leak

A watchdog protects the shared machine: a run with any process of its tree past
``--watchdog-gib`` (3.5 GiB: a role 1.5 GiB past its limit) is ended and reported as such.

``--example examples/cartpole_impala.yaml`` runs the same on the ``queue`` data path; there the
accounting check is env steps = rollouts trained (the rows' ``rollouts_actor{j}``) x rollout size.

``--raylets 2`` runs each training on a fresh ``ray.cluster_utils.Cluster`` of plain raylets (no
custom resources; ``--raylet-cpus`` CPUs and ``--raylet-memory-gib`` memory each, a 0-CPU head),
through ``kilorl train --address``: there another node has room, so each leaking role must be
*moved* (outcome ``completed``, another node) before its limit instead of restarted in place
(issue 38, item 2):

    PYTHONPATH=. python benchmarks/in_place_bench.py --rates 20,50,100 --runs 3 --raylets 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
BUDGET = 2 * 2**30
THRESHOLD = 475.0
MAX_CONCURRENT = 2
"""Both leaking roles may be decided in one round (with 1, the actor waits behind the learner's restart)."""


def overrides(rate_mib_s: float, seed: int, roles: tuple[str, ...] = ("actor", "learner"),
              leak_after_s: float = 5.0) -> list[str]:
    """``kilorl train -o`` overrides: the monitor on, a 2 GiB budget, ``roles`` leaking (none: no leak)
    from ``leak_after_s`` after each starts reporting."""
    leaks = ", ".join(f"{{role: {r}, rank: 0, bytes_per_s: {int(rate_mib_s * MiB)}, start_after_s: {leak_after_s:g}}}"
                      for r in roles)
    return ["logging.progress=false", "logging.tensorboard=false", f"train.seed={seed}",
            # the whole step budget, as the issue asks: no stop on the example's evaluation threshold
            "evaluation.stop_return=null",
            "monitor.prometheus.enabled=true", "monitor.prometheus.port=0",
            f"monitor.memory_budget_bytes={{actor: {BUDGET}, learner: {BUDGET}}}",
            "monitor.migration.migrate_before_s=600", f"monitor.migration.max_concurrent={MAX_CONCURRENT}",
            f"monitor.inject_leaks=[{leaks}]"]


def tree_rss(pid: int) -> tuple[int, str]:
    """The largest RSS (bytes) of any process in ``pid``'s tree (embedded Ray: every role is in it), and its name."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, ""
    largest, name = 0, ""
    for proc in procs:
        try:
            rss = proc.memory_info().rss
            if rss > largest:
                largest, name = rss, " ".join(proc.cmdline())[:80]
        except psutil.Error:
            pass
    return largest, name


def watched(cmd: list[str], watchdog_bytes: float, timeout_s: float) -> tuple[int, str, str, float]:
    """Runs ``cmd``; ends its whole tree once a process of it passes ``watchdog_bytes``.
    Returns (exit code, stdout, stderr, the largest RSS seen)."""
    import psutil

    peak, name = 0, ""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=REPO, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            rss, who = tree_rss(os.getpid())  # this process's tree: the run's, and local raylets' workers
            if rss > peak:
                peak, name = rss, who
            if peak > watchdog_bytes or time.monotonic() > deadline:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                proc.kill()
                proc.wait()
                err.write(f"\nwatchdog: ended the run (largest RSS {peak / 2**30:.2f} GiB, {name})\n")
                break
            time.sleep(0.5)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), peak


def one_run(rate: float, seed: int, root: Path, roles: tuple[str, ...], watchdog_bytes: float,
            leak_after_s: float, example: str = "examples/cartpole_ppo.yaml", extra: tuple[str, ...] = (),
            address: str | None = None) -> dict:
    run = root / f"rate{rate:g}-s{seed}-{'-'.join(roles) or 'none'}"
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", example, "--run-dir", str(run),
           *(["--address", address] if address else []),
           *sum((["-o", o] for o in [*overrides(rate, seed, roles, leak_after_s), *extra]), [])]
    t0 = time.time()
    code, stdout, stderr, peak = watched(cmd, watchdog_bytes, timeout_s=900)
    wall = time.time() - t0
    if run.is_dir():  # the whole output, for the record
        (run / "train.out").write_text(stdout)
        (run / "train.err").write_text(stderr)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    path = run / "monitor" / "migrations.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    last = rows[-1] if rows else {}
    res = {"rate_mib_s": rate, "seed": seed, "leak_after_s": leak_after_s, "leaking": list(roles), "exit": code,
           "wall_s": round(wall, 1),
           "peak_rss_gib": round(peak / 2**30, 2),
           "last_line": stdout.strip().splitlines()[-1] if stdout.strip() else stderr[-500:],
           "env_steps": last.get("env_steps"), "iteration": last.get("iteration"),
           "lost_rollouts": last.get("lost_rollouts"),
           "rollouts_trained": sum(v for k, v in last.items() if k.startswith("rollouts_actor")) or None,
           "records": [{"role": r["role"], "outcome": r["outcome"], "level_gib": round(r["level_bytes"] / 2**30, 3),
                        "limit_gib": round((r["limit_bytes"] or 0) / 2**30, 3),
                        "forecast": r["reason"].split("; ")[0].split(", ")[-1],
                        "waited": r["reason"].split("; ")[1] if "; " in r["reason"] else "",
                        "serving_s": None if r["serving_s"] is None else round(r["serving_s"], 2),
                        "from_node": r.get("from_node"), "to_node": r.get("to_node"),
                        "old_ended_s": None if r.get("old_ended_s") is None else round(r["old_ended_s"], 2)}
                       for r in records]}
    res["startup_s"] = next((row.get("startup_s") for row in rows if "startup_s" in row), None)
    if code == 0:
        ev = subprocess.run([sys.executable, "-m", "kilorl.cli.main", "eval", str(run), "--episodes", "20",
                             "--checkpoint", "latest", "--json"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
        res["eval_mean"] = json.loads(ev.stdout.strip().splitlines()[-1])["episode_return_mean"]
    return res


def replaced(record: dict, moved: bool) -> bool:
    """Restarted in place on one node; moved to another node where the cluster has one."""
    if moved:
        return record["outcome"] == "completed" and record["from_node"] != record["to_node"]
    return record["outcome"] == "restarted_in_place"


@contextmanager
def raylets(n: int, cpus: int, memory_gib: float) -> Iterator[str | None]:
    """A fresh local Ray cluster of ``n`` plain raylets (its address), or None for embedded Ray."""
    if n <= 0:
        yield None
        return
    from kilorl.trainer.ray_start import start_local_cluster

    # ray.cluster_utils starts its raylets without token authentication, while `kilorl train --address`
    # presents the machine's token when one exists (kilorl/trainer/ray_auth.py): one mode for both sides
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = start_local_cluster({"num_cpus": 0}, [{"num_cpus": cpus, "memory": int(memory_gib * 2**30)}] * n)
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="20,50,100", help="leak rates in MiB/s")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1, help="seeds first-seed .. first-seed + runs - 1")
    ap.add_argument("--out", help="run directories go here (default: a temporary directory)")
    ap.add_argument("--roles", default="actor,learner",
                    help="the roles that leak in each run (default: both at once; none: a run without a leak)")
    ap.add_argument("--leak-after-s", type=float, default=5.0,
                    help="the leak begins this long after the role starts reporting (start-up included)")
    ap.add_argument("--watchdog-gib", type=float, default=3.5, help="end a run once a process of it has this RSS")
    ap.add_argument("--example", default="examples/cartpole_ppo.yaml")
    ap.add_argument("-o", dest="extra", action="append", default=[], help="further config overrides")
    ap.add_argument("--raylets", type=int, default=0,
                    help="train on a fresh local cluster of this many plain raylets (0: embedded Ray, one node)")
    ap.add_argument("--raylet-cpus", type=int, default=3, help="CPUs each raylet declares")
    ap.add_argument("--raylet-memory-gib", type=float, default=6.0, help="memory each raylet declares")
    args = ap.parse_args()
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="in-place-"))
    for rate in (float(r) for r in args.rates.split(",")):
        for seed in range(args.first_seed, args.first_seed + args.runs):
            leaking = () if args.roles == "none" else tuple(args.roles.split(","))
            with raylets(args.raylets, args.raylet_cpus, args.raylet_memory_gib) as address:
                r = one_run(rate, seed, root, leaking, args.watchdog_gib * 2**30, args.leak_after_s, args.example,
                            tuple(args.extra), address)
            roles = {x["role"]: x for x in r["records"]}
            r["raylets"] = args.raylets
            r["replaced_before_limit"] = (sorted(roles) == sorted(leaking)
                                          and all(replaced(x, moved=args.raylets > 1) and x["level_gib"] < x["limit_gib"]
                                                  for x in roles.values()))
            r["eval_met"] = r.get("eval_mean") is not None and r["eval_mean"] >= THRESHOLD
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
