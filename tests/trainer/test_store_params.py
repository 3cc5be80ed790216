"""Parameters live in store workers: a given ``--store`` worker, or one per Ray node started by the run."""

from __future__ import annotations

import json
import threading
import time

import psutil
import pytest

from kilorl.params.store_backed import layout_key, shard_key
from kilorl.trainer import Trainer
from tests.conftest import tiny_config
from tests.store.store_helpers import wait_until


def test_a_run_keeps_its_parameter_shards_in_the_given_store_worker_while_it_trains(ray_local, store_worker, tmp_path):
    cfg = tiny_config(parallelism={"actor": 2, "parameter_server": 2}, train={"total_env_steps": 4096},
                      store={"address": store_worker.address, "token": store_worker.token})
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(r=Trainer(cfg, tmp_path / "run").fit()))
    run.start()
    seen: dict[int, list[str]] = {}
    with store_worker.client() as c:
        while run.is_alive() and len(seen) < 3:
            v = c.latest_version(layout_key("policy"))
            if v is not None and v not in seen:
                record = json.loads(bytes(c.get_version(layout_key("policy"), v).value))
                seen[v] = [t["name"] for t in record["tensors"]]
                assert all(c.latest_version(shard_key("policy", k)) >= v for k in range(2))
            time.sleep(0.01)
    run.join(300)
    assert len(seen) >= 2, f"versions seen while training: {sorted(seen)}"  # the run was publishing into it
    names = next(iter(seen.values()))
    assert any(n.startswith("model/policy_head") for n in names) and any(n.startswith("obs_rms/") for n in names)
    assert result["r"].env_steps == 4096
    assert store_worker.alive()  # a given worker is the user's: the run does not stop it


def test_the_run_starts_one_store_worker_per_node_and_stops_it(ray_local):
    from kilorl.trainer.store_fleet import StoreFleet

    fleet = StoreFleet.start("32MiB", 2)
    (pid,) = fleet.pids()
    assert len(fleet.connector.addresses) == len(ray_local.nodes()) == 1
    client = fleet.connector()
    assert client.ping() and client.transport == "unix"  # the node's own worker: shared memory
    client.close()
    fleet.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_killed_store_node_actor_takes_its_worker_with_it(ray_local):
    from kilorl.trainer.store_fleet import StoreFleet

    fleet = StoreFleet.start("32MiB", 2)
    (pid,) = fleet.pids()
    ray_local.kill(fleet.nodes[0])  # SIGKILL: no stop() runs, the kernel ends the child
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
               timeout=30, what="the store worker to die with its actor")
    fleet.nodes = []


def test_a_store_worker_restarted_in_place_serves_again_on_its_port_without_its_injected_leak(tmp_path):
    from kilorl.roles.store_node import WorkerProcess
    from kilorl.store import StoreClient
    from kilorl.store.client.reconnect import RECONNECT_TIMEOUT_S
    from kilorl.trainer.store_fleet import worker_options

    leak = ["--inject-leak", str(8 * 2**20), "--inject-leak-after", "0"]
    worker = WorkerProcess("127.0.0.1", "t" * 32, "32MiB", 2, None, "restart-test", l2_dir=str(tmp_path / "l2"),
                           extra=worker_options(RECONNECT_TIMEOUT_S, leak))
    try:
        address, old = worker.wait_ready(), worker.pid()
        new = worker.restart_in_place(timeout=60)
        assert new != old and (not psutil.pid_exists(old) or psutil.Process(old).status() == psutil.STATUS_ZOMBIE)
        assert worker.address() == address and worker.restarts == 1  # the same port: clients reconnect to it
        assert "--inject-leak" not in " ".join(psutil.Process(new).cmdline())  # the fault stayed with the old one
        client = StoreClient(address, "t" * 32, zero_copy=False)
        assert client.ping()
        client.close()
    finally:
        worker.stop()


@pytest.mark.parametrize("address", ["no-port-here", "host:notaport"])
def test_a_malformed_store_address_is_refused_naming_the_field(address):
    from kilorl.trainer.store_fleet import StoreFleet

    with pytest.raises(ValueError, match=r"store\.address: expected HOST:PORT"):
        StoreFleet.external(address, None)


def test_durable_sync_writes_every_published_version_through_to_the_workers_l2(ray_local, tmp_path):
    cfg = tiny_config(train={"total_env_steps": 512}, sync={"durable": True})
    Trainer(cfg, tmp_path / "run").fit()
    files = [p for p in (tmp_path / "run" / "store-l2").rglob("*") if p.is_file() and p.stat().st_size]
    assert files, "nothing reached L2"
    plain = tiny_config(train={"total_env_steps": 512})
    Trainer(plain, tmp_path / "plain").fit()
    assert not [p for p in (tmp_path / "plain" / "store-l2").rglob("*") if p.is_file() and p.stat().st_size]


def test_the_runs_reconnect_deadline_reaches_the_roles_clients_and_the_workers_remote_reads(ray_local):
    from kilorl.trainer import Cluster
    from kilorl.trainer.session import RoleSession

    cfg = tiny_config(store={"reconnect_timeout_s": 7.5})
    with RoleSession(cfg, Cluster()) as roles:
        client = roles.store.client  # made as every role makes its own (the store is pickled to them)
        assert (roles.store.reconnect_timeout_s, client.reconnect_timeout, client.replay) == (7.5, 7.5, False)
        (pid,) = roles.fleet.pids()
        cmd = psutil.Process(pid).cmdline()
        assert cmd[cmd.index("--get-timeout") + 1] == "7.5"  # a read of another node's holder rides it out as long
