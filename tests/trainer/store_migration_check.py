"""Run in a fresh process by test_migration: a 2-raylet Ray cluster whose store worker on one node leaks.

The run starts one store worker per Ray node (the head's on the driver's node, rank 0);
the worker of rank 1 leaks host memory (``monitor.inject_leaks`` with role ``store``).
The driver reads its memory through the worker's ``stats`` and has it hand its objects to
the other workers and leave. Prints one JSON line: the run's result, the migration records,
and the metrics rows.
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

BATCHES = 80
STEP_S = 0.0015


def main(run_dir: Path) -> None:
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 << 20})
    for name in ("a", "b"):
        cluster.add_node(num_cpus=3, memory=2 << 30, object_store_memory=80 << 20,
                         resources={node_resource(name): NODE_RESOURCE_AMOUNT})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        cfg = migration_config([{"role": "store", "rank": 1, "bytes_per_s": LEAK_BYTES_PER_S}], BATCHES * 256)
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
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "run")
