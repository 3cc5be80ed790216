"""Run in a fresh process by test_multi_node: a 2-raylet Ray cluster on this machine.

Prints one JSON line: store workers per node, where each actor reads parameters from, the
learners' nodes and their weight digests after a step (equal = they all-reduced).
"""

from __future__ import annotations

import json

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kilorl.roles.remote import ActorProcess, LearnerProcess
from kilorl.trainer.ray_start import start_local_cluster
from kilorl.trainer.session import parameter_store
from kilorl.trainer.store_fleet import StoreFleet
from tests.conftest import fake_rollout, tiny_config


def replay_across_nodes(fleet: StoreFleet) -> dict:
    """A replay table sharded over both nodes' workers (found through the mesh, as a learner
    finds them): chunks inserted round robin, one sample drawn from both shards."""
    import numpy as np

    from kilorl.config_replay import ReplayBufferConfig
    from kilorl.roles.store_replay import store_replay_factory

    make = store_replay_factory(fleet.connector, ReplayBufferConfig(sharding=True, compression="zstd"), "check")
    storage = make("mesh", {"obs": ((32,), np.float32), "action": ((), np.int64)}, 1000, 0)
    for i in range(4):
        storage.insert({"obs": np.full((50, 32), i, np.float32), "action": np.arange(50) + 50 * i})
    s = storage.table.sample(400)
    out = {"shards": [c.address for c in storage.clients], "sampled_shards": sorted(set(s.shards.tolist())),
           "rows": len(storage), "exact": bool(np.all(s.columns["obs"][:, 0] == s.columns["action"] // 50))}
    storage.close()
    return out


def actors_insert_on_their_nodes(fleet: StoreFleet, store: object, nodes: list[str]) -> dict:
    """DQN with its table sharded over both nodes' workers: one learner on node 0, an env
    runner on each node. Each env runner inserts its rollouts into its own node's shard and
    hands the learner a ``ReplayInsert``; the learner samples from both shards. The counts come
    from each worker's own table stats."""
    import time

    from kilorl.roles.store_replay import ReplayInsert
    from kilorl.store import StoreClient

    t0 = time.perf_counter()

    cfg = tiny_config(algo={"name": "dqn", "learning_starts": 0, "batch_size": 16, "train_freq": 8,
                            "rollout_length": 16, "buffer_size": 4000},
                      model={"hidden_sizes": [16]}, parallelism={"actor": 2, "learner": 1},
                      replay_buffer={"sharding": True, "compression": "zstd"})
    prefix = "check-actor-inserts"
    pin = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes]
    learner = ray.remote(num_cpus=0)(LearnerProcess).options(scheduling_strategy=pin[0]).remote(
        cfg, store, 0, 1, "gloo", replay_prefix=prefix)
    ray.get(learner.start.remote(None))
    first = 100  # past the PPO learners' versions of the same parameter name, on the same workers
    ray.get(learner.publish.remote(first))
    actors = [ray.remote(num_cpus=0)(ActorProcess).options(scheduling_strategy=pin[i]).remote(
        cfg, store, i, seed=i, replay_prefix=prefix) for i in range(2)]
    handed, stats, env_steps = [], [], 0
    for version in (first + 1, first + 2):
        refs = [a.collect.options(num_returns=2).remote(first, env_steps)[0] for a in actors]
        got = ray.get(refs)
        handed += [{"type": type(r).__name__, "worker": r.worker, "rows": r.rows} for r in got
                   if isinstance(r, ReplayInsert)]
        env_steps += sum(r.env_steps for r in got)
        stats.append(ray.get(learner.update.remote(version, env_steps, *refs)))
    workers = fleet.connector.addresses
    tables = {}
    for node in nodes:
        client = StoreClient(workers[node], token=fleet.connector.token)
        tables[node] = [t for t in client.replay_tables.list() if t["name"].startswith(prefix)]
        client.close()
    for h in (*actors, learner):
        ray.kill(h)
    return {"handed": handed, "tables": tables, "stats": stats, "seconds": time.perf_counter() - t0,
            "actor_nodes": [nodes[0], nodes[1]], "learner_node": nodes[0]}


def main() -> None:
    cluster = start_local_cluster({"num_cpus": 2, "object_store_memory": 80 << 20},
                                  [{"num_cpus": 2, "object_store_memory": 80 << 20}])
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    fleet = None
    try:
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        fleet = StoreFleet.start("32MiB", 3)
        cfg = tiny_config(parallelism={"actor": 2, "learner": 2, "parameter_server": 2})
        store = parameter_store(cfg, fleet)
        pin = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes]
        learners = [ray.remote(num_cpus=1)(LearnerProcess).options(scheduling_strategy=pin[r]).remote(
            cfg, store, r, 2, "gloo") for r in range(2)]
        master = ray.get(learners[0].rendezvous.remote())
        ray.get([lr.start.remote(master) for lr in learners])
        ray.get(learners[0].publish.remote(0))
        actors = [ray.remote(num_cpus=1)(ActorProcess).options(scheduling_strategy=pin[i]).remote(
            cfg, store, i, seed=i) for i in range(2)]
        infos = ray.get([a.collect.options(num_returns=2).remote(0)[1] for a in actors])
        ray.get([lr.update.remote(1, 256, fake_rollout(seed=r)) for r, lr in enumerate(learners)])
        print(json.dumps({
            "nodes": nodes, "workers": fleet.connector.addresses,
            "actor_sources": ray.get([a.parameter_source.remote() for a in actors]),
            "actor_versions": [i["version"] for i in infos],
            "learner_nodes": ray.get([lr.node_id.remote() for lr in learners]),
            "digests": ray.get([lr.weights_digest.remote() for lr in learners]),
            "master": master,
            "replay": replay_across_nodes(fleet),
            "actor_inserts": actors_insert_on_their_nodes(fleet, store, nodes),
        }))
    finally:
        if fleet is not None:
            fleet.close()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
