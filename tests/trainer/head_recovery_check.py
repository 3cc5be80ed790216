"""Run in a fresh process by test_multi_node: the mesh head's store worker is killed mid-run.

Two raylets, one store worker each (node A's is the mesh ``--head``, node B's joins it),
one learner on A and one actor per node, driven by the real ``OnPolicyLoop``. After
iteration 3 the head's worker is SIGKILLed; its ``StoreNode`` restarts it on the same
port with an empty memory and a fresh built-in metastore. Prints one JSON line: per
iteration the versions each actor collected with, the restarts, the mesh members each
worker sees at the end and the version each node's worker holds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from types import SimpleNamespace

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kilorl.roles.remote import ActorProcess, LearnerProcess
from kilorl.store import StoreClient
from kilorl.store.client.store_client import HOME_CHECK_S
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.ray_start import start_local_cluster
from kilorl.trainer.session import parameter_store
from kilorl.trainer.store_fleet import StoreFleet
from tests.conftest import tiny_config

KILL_AFTER = 3


def members_seen(address: str, token: str, want: int, timeout: float = 30.0) -> list[str]:
    """The mesh members ``address``'s worker lists, once it lists ``want`` (or at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with StoreClient(address, token=token) as c:
                members = sorted(c.stats()["cluster"]["members"])
        except OSError:
            members = []
        if len(members) >= want or time.monotonic() > deadline:
            return members
        time.sleep(0.1)


def worker_log(address: str) -> str:
    """The log tail of the run's worker serving ``address`` (for a failure message)."""
    import glob
    from pathlib import Path

    port = address.rsplit(":", 1)[1]
    for log in glob.glob("/tmp/kilorl-store-*/worker.log"):
        text = Path(log).read_text(errors="replace")
        if f":{port} " in text:
            return text[-3000:]
    return "(no log found)"


def main() -> None:
    cluster = start_local_cluster({"num_cpus": 2, "object_store_memory": 80 << 20},
                                  [{"num_cpus": 2, "object_store_memory": 80 << 20}])
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    fleet = None
    try:
        here = ray.get_runtime_context().get_node_id()
        nodes = sorted((n["NodeID"] for n in ray.nodes() if n["Alive"]), key=lambda n: n != here)
        fleet = StoreFleet.start("32MiB", 3)
        cfg = tiny_config(parallelism={"actor": 2, "learner": 1, "parameter_server": 2},
                          train={"total_env_steps": 2560})
        store = parameter_store(cfg, fleet)
        pin = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes]
        learner = ray.remote(num_cpus=1)(LearnerProcess).options(scheduling_strategy=pin[0]).remote(cfg, store, 0, 1)
        ray.get(learner.start.remote(None))
        ray.get(learner.publish.remote(0))
        actors = [ray.remote(num_cpus=1, max_restarts=3, max_task_retries=0)(ActorProcess).options(
            scheduling_strategy=pin[i]).remote(cfg, store, i, seed=i) for i in range(2)]
        ray.get([a.ready.remote() for a in actors])
        loop = OnPolicyLoop(cfg, SimpleNamespace(actors=actors, learners=[learner], learners_per_policy=False,
                                                  rank_zeros=lambda: [learner]), 0, 0)
        head_pid = fleet.pids()[0]
        rows = []
        for it in loop:
            rows.append({"iteration": it.iteration, "steps": sum(i["env_steps"] for i in it.infos),
                         "versions": [i["version"] for i in it.infos]})
            if it.iteration == KILL_AFTER:
                os.kill(head_pid, signal.SIGKILL)
            elif it.iteration == KILL_AFTER + 1:
                # Once the restarted head serves, a failed-over client goes home on its first
                # operation after HOME_CHECK_S: let that interval pass so the remaining
                # iterations (not the run's end) decide whether the actors read locally again.
                members_seen(fleet.connector.addresses[nodes[0]], fleet.connector.token, 2)
                time.sleep(HOME_CHECK_S + 0.2)
        token = fleet.connector.token
        workers = [fleet.connector.addresses[n] for n in nodes]
        print(json.dumps({"rows": rows, "restarts": fleet.restarts(), "republished": loop.republished}),
              file=sys.stderr, flush=True)
        for address in workers:
            if not members_seen(address, token, 2):
                raise SystemExit(f"worker {address} does not serve after the run; restarts {fleet.restarts()}:\n"
                                 f"{worker_log(address)}")
        latest = {}
        for n, address in zip(nodes, workers):
            with StoreClient(address, token=token) as c:
                latest[n] = c.latest_version("policy/layout")
        print(json.dumps({
            "nodes": nodes, "workers": workers, "rows": rows, "restarts": fleet.restarts(),
            "head_pid_changed": fleet.pids()[0] != head_pid, "republished": loop.republished,
            "members": [members_seen(a, token, 2) for a in workers], "latest": latest,
            "actor_sources": ray.get([a.parameter_source.remote() for a in actors]),
        }))
    finally:
        if fleet is not None:
            fleet.close()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
