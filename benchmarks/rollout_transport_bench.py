"""Rollout hand-off actor -> learner: ``store.transport: store`` vs ``ray``, side by side.

Two measurements, interleaved (ray, store, ray, store, ...), medians:

- **hand-off**: a producer Ray actor builds a ``[T, N]`` rollout and returns it (``ray``) or a
  ``RolloutHandle`` to its store object (``store``); a consumer Ray actor receives it as a task
  argument, as the learner's ``update`` does, and rebuilds the ``Rollout`` (``store``: reads and
  deletes the key). Latency = consumer's ``time.time()`` with the arrays in hand minus the
  producer's when the rollout was finished (one host: one clock). ``--nodes 2`` runs two raylets
  (``ray.cluster_utils.Cluster``) with producer and consumer on different raylets and one store
  worker per raylet (the mesh pulls the object across once).
- **training**: CartPole PPO (``tests.conftest.tiny_config``-sized, 2 actors) env-steps/s
  excluding start-up, ``--train-runs`` runs per transport (one node only).

    python benchmarks/rollout_transport_bench.py [--nodes 1] [--samples 30] [--train-runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = {
    # name -> (T, N, obs feature shape): CartPole's batch and an image-sized one
    "CartPole [128, 8, 4] (~30 KB)": (128, 8, (4,)),
    "image-like [128, 16, 1024] (~8 MB)": (128, 16, (1024,)),
}


def make_rollout(T: int, N: int, obs: tuple[int, ...], seed: int) -> Any:
    from kilorl.core import Rollout
    from kilorl.envs.normalization import Moments

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, N, *obs)).astype(np.float32)
    steps = {"obs": x, "actions": rng.integers(0, 2, (T, N)), "rewards": rng.normal(size=(T, N)).astype(np.float32),
             "dones": np.zeros((T, N), np.float32), "logp": np.zeros((T, N), np.float32),
             "values": np.zeros((T, N), np.float32)}
    return Rollout(steps, {"values": np.zeros(N, np.float32)}, {"obs": [Moments.of(x, obs)]}, version=1)


class Producer:
    def __init__(self, connector: Any) -> None:
        from kilorl.roles.rollout_transport import StoreRolloutWriter

        self.writer = StoreRolloutWriter(connector(), actor=0)

    def make(self, transport: str, T: int, N: int, obs: tuple[int, ...], seed: int) -> tuple[Any, float]:
        rollout = make_rollout(T, N, obs, seed)
        produced = time.time()
        return (rollout if transport == "ray" else self.writer.put(rollout)), produced


class Consumer:
    def __init__(self, connector: Any) -> None:
        from kilorl.roles.rollout_transport import StoreRolloutReader

        self.reader = StoreRolloutReader(connector())

    def take(self, item: Any, produced: float) -> tuple[float, list[int]]:
        from kilorl.roles.rollout_transport import RolloutHandle

        rollout = self.reader.get(item) if isinstance(item, RolloutHandle) else item
        latency = time.time() - produced
        shape = list(rollout.steps["obs"].shape)
        if isinstance(item, RolloutHandle):
            self.reader.release([item])
        return latency, shape

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def handoff(nodes: int, samples: int) -> dict[str, dict[str, float]]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from kilorl.trainer.store_fleet import StoreFleet

    cluster = None
    if nodes > 1:
        from kilorl.trainer.ray_start import start_local_cluster

        cluster = start_local_cluster({"num_cpus": 2}, [{"num_cpus": 2}])
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    node_ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    fleet = StoreFleet.start("512MiB", 2, nodes=node_ids)
    try:
        def on(i: int) -> Any:
            return NodeAffinitySchedulingStrategy(node_ids[i % len(node_ids)], soft=False)

        prod = ray.remote(num_cpus=0)(Producer).options(scheduling_strategy=on(0)).remote(fleet.connector)
        cons = ray.remote(num_cpus=0)(Consumer).options(scheduling_strategy=on(1)).remote(fleet.connector)
        out: dict[str, dict[str, float]] = {}
        for name, (T, N, obs) in SIZES.items():
            lat: dict[str, list[float]] = {"ray": [], "store": []}
            for s in range(samples + 2):  # the first two of each: warm-up
                for transport in ("ray", "store"):
                    item, produced = prod.make.options(num_returns=2).remote(transport, T, N, obs, s)
                    latency, shape = ray.get(cons.take.remote(item, produced))
                    assert shape == [T, N, *obs], shape
                    if s >= 2:
                        lat[transport].append(latency * 1e3)
            left = fleet.connector().keys("rollout/")
            assert not left, f"rollout keys left: {left}"
            out[name] = {f"{t}_p50_ms": statistics.median(v) for t, v in lat.items()}
            out[name]["ray_over_store"] = out[name]["ray_p50_ms"] / out[name]["store_p50_ms"]
            print(name, json.dumps(out[name]), flush=True)
        return out
    finally:
        fleet.close()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def training(runs: int) -> dict[str, float]:
    from kilorl.config import config_from_dict
    from kilorl.trainer import Trainer

    sps: dict[str, list[float]] = {"ray": [], "store": []}
    for i in range(runs):
        for transport in ("ray", "store"):
            cfg = config_from_dict({
                "env": {"id": "CartPole-v1"}, "algo": {"rollout_length": 64, "num_minibatches": 2, "update_epochs": 4},
                "parallelism": {"actor": 2, "envs_per_actor": 8},
                "train": {"total_env_steps": 16384, "seed": 3 + i, "pipeline_depth": 1},
                "store": {"transport": transport},
                "logging": {"progress": False, "tensorboard": False, "report_every_s": 0.0}})
            with tempfile.TemporaryDirectory() as tmp:
                r = Trainer(cfg, Path(tmp) / "run").fit()
            sps[transport].append(r.env_steps / max(r.wall_time - r.startup_s, 1e-9))
            print(transport, f"run {i}: {sps[transport][-1]:.0f} env-steps/s", flush=True)
    out = {f"{t}_median_sps": statistics.median(v) for t, v in sps.items()}
    out["store_over_ray"] = out["store_median_sps"] / out["ray_median_sps"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1, choices=[1, 2])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--train-runs", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("PYTHONPATH", str(REPO))
    result: dict[str, Any] = {"machine": platform.node(), "load": os.getloadavg(), "nodes": args.nodes,
                              "handoff": handoff(args.nodes, args.samples)}
    if args.train_runs:
        result["training"] = training(args.train_runs)
        print("training", json.dumps(result["training"]), flush=True)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
