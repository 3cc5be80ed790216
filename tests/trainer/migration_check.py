"""Run in a fresh process by test_migration: a 2-raylet Ray cluster, roles that leak.

Both nodes declare their ``kilorl_node_<name>`` resource. One run trains CartPole with
roles leaking host memory (``monitor.inject_leaks``); the driver moves each away:

* default: actor 0 and learner 0 leak; each moves to the other node;
* ``--learners 2``: two learners, only learner 0 leaks; moving it restarts the group;
* ``--store``: the store worker of rank 1 (one per Ray node, the head's is 0) leaks; it
  hands its objects to the other workers and leaves;
* ``--end-first``: as the default, with ``migration.replacement_start_s`` far above any time to
  the limit, so each old process ends before its replacement on the other node starts.

Prints one JSON line: the run's result, the migration records and the metrics rows.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import ray

from kilorl.trainer import Cluster, Trainer
from tests.trainer.migration_config import LEAK_BYTES_PER_S, migration_config
from tests.trainer.raylets import named_raylets

BATCHES = 100
STEP_S = 0.0015
"""Batches of 2 actors x 4 envs x 32 steps at >= 1.5 ms a step: >= 19 s of training, past both decisions."""


def leaks(learners: int, store: bool) -> list[dict]:
    if store:
        return [{"role": "store", "rank": 1, "bytes_per_s": LEAK_BYTES_PER_S}]
    out = [{"role": "learner", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}]
    if learners == 1:
        out.append({"role": "actor", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S})
    return out


def main(run_dir: Path, learners: int = 1, store: bool = False, end_first: bool = False) -> None:
    with named_raylets() as cluster:
        cfg = migration_config(leaks(learners, store), (80 if store else BATCHES) * 256, learners=learners)
        if end_first:
            mon = cfg.monitor
            cfg = cfg.model_copy(update={"monitor": mon.model_copy(update={
                "migration": mon.migration.model_copy(update={"replacement_start_s": 1e6})})})
        cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={
            "id": "tests.trainer.broken_env:SlowCartPole", "kwargs": {"step_s": STEP_S}})})
        result = Trainer(cfg, run_dir, cluster=Cluster(address=cluster.address)).fit()
        records = [json.loads(x) for x in (run_dir / "monitor" / "migrations.jsonl").read_text().splitlines()]
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        print(json.dumps({"env_steps": result.env_steps, "stopped": result.stopped, "batch": cfg.rollout_steps,
                          "total_env_steps": cfg.train.total_env_steps, "records": records, "rows": rows,
                          "nodes": [n["NodeID"][:12] for n in ray.nodes() if n["Alive"]]}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", nargs="?", type=Path)
    ap.add_argument("--learners", type=int, default=1)
    ap.add_argument("--store", action="store_true")
    ap.add_argument("--end-first", action="store_true")
    args = ap.parse_args()
    main(args.run_dir or Path(tempfile.mkdtemp()) / "run", learners=args.learners, store=args.store,
         end_first=args.end_first)
