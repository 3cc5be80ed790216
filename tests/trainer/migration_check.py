"""Run in a fresh process by test_migration: a 2-raylet Ray cluster, an actor and a learner that leak.

Both nodes declare their ``kilorl_node_<name>`` resource. One run trains CartPole with the
actor 0 and the learner 0 leaking host memory (``monitor.inject_leaks``); the driver moves
each to the other node. With ``--learners 2`` the run has two learners and only learner 0
leaks: moving it restarts the group. Prints one JSON line: the run's result, where each
role ran before and after, the migration records and the metrics rows.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import ray
from ray.cluster_utils import Cluster as RayCluster

from kilorl.placement.ray_placement import NODE_RESOURCE_AMOUNT, node_resource
from kilorl.trainer import Cluster, Trainer
from tests.trainer.migration_config import LEAK_BYTES_PER_S, migration_config

BATCHES = 100
STEP_S = 0.0015
"""Batches of 2 actors x 4 envs x 32 steps at >= 1.5 ms a step: >= 19 s of training, past both decisions."""


def main(run_dir: Path, learners: int = 1) -> None:
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 << 20})
    for name in ("a", "b"):
        cluster.add_node(num_cpus=3, memory=2 << 30, object_store_memory=80 << 20,
                         resources={node_resource(name): NODE_RESOURCE_AMOUNT})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        leaks = [{"role": "learner", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S}]
        if learners == 1:
            leaks.append({"role": "actor", "rank": 0, "bytes_per_s": LEAK_BYTES_PER_S})
        cfg = migration_config(leaks, BATCHES * 256, learners=learners)
        cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={
            "id": "tests.trainer.broken_env:SlowCartPole", "kwargs": {"step_s": STEP_S}})})
        result = Trainer(cfg, run_dir, cluster=Cluster(address=cluster.address)).fit()
        records = [json.loads(x) for x in (run_dir / "monitor" / "migrations.jsonl").read_text().splitlines()]
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        print(json.dumps({"env_steps": result.env_steps, "stopped": result.stopped, "batch": cfg.batch_size,
                          "total_env_steps": cfg.train.total_env_steps, "records": records, "rows": rows,
                          "nodes": [n["NodeID"][:12] for n in ray.nodes() if n["Alive"]]}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args.pop(args.index("--learners") + 1)) if "--learners" in args else 1
    args = [a for a in args if a != "--learners"]
    main(Path(args[0]) if args else Path(tempfile.mkdtemp()) / "run", learners=n)
