"""Versioned objects across a mesh of three real workers: one history per name.

Every test runs with the built-in metastore (first worker ``--head``) and with a real
etcd. Publishes go through worker A; readers talk to B and C.
"""

from __future__ import annotations

import gc
import statistics
import threading
import time

import numpy as np
import pytest
from store_helpers import wait_until

from kilorl.store import InvalidRequest, VersionGone
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)

MIB = 1024 * 1024


@pytest.fixture(params=["builtin", "etcd"])
def metastore(request) -> str:
    if request.param == "builtin":
        return "builtin"
    return request.getfixturevalue("etcd_server").url


def payload(version: int, size: int = 2 * MIB) -> np.ndarray:
    return np.random.default_rng(version).integers(0, 256, size + version, dtype=np.uint8)


def dram_used(client) -> int:
    return client.stats()["tiers"]["dram"]["used"]


@pytest.mark.timeout(180)
def test_versions_published_through_a_read_equal_through_b_and_c(cluster_of, metastore):
    a, b, c = cluster_of(metastore).start(3)
    ca, cb, cc = a.client(), b.client(), c.client()
    assert cb.latest_version("policy") is None
    for v in range(1, 6):
        assert ca.publish("policy", payload(v)) == v  # numbered by the name's owner: latest + 1
        for reader in (cb, cc):
            assert reader.latest_version("policy") == v
            got = reader.get_version("policy", v)
            assert got.version == v and np.array_equal(got.value, payload(v))
            latest = reader.get_version("policy")
            assert latest.version == v and np.array_equal(latest.value, payload(v))
    with pytest.raises(InvalidRequest, match="not newer"):
        cb.publish("policy", b"old", version=3)  # one history: B knows A's versions
    assert cc.publish("policy", payload(9), version=9) == 9
    assert ca.get_version("policy").version == 9
    with pytest.raises(VersionGone):
        cb.get_version("policy", 1)  # keep_versions=2: long reclaimed everywhere


@pytest.mark.timeout(180)
def test_get_version_ranges_pull_only_those_bytes(cluster_of, metastore):
    a, b, _ = cluster_of(metastore).start(3)
    ca, cb = a.client(), b.client()
    value = payload(1, 8 * MIB)
    ca.publish("w", value)
    before = ca.stats()["cluster"]["counters"]["bytes_served"]
    ranges = [(0, 1000), (5 * MIB, MIB), (len(value) - 10, 10)]
    got = cb.get_version("w", ranges=ranges)
    assert got.version == 1
    assert [bytes(x) for x in got.value] == [value[o:o + n].tobytes() for o, n in ranges]
    assert ca.stats()["cluster"]["counters"]["bytes_served"] - before <= MIB + 1010 + 4096


@pytest.mark.timeout(180)
def test_wait_version_on_c_returns_within_50ms_of_the_publish_on_a(cluster_of, metastore):
    a, b, c = cluster_of(metastore).start(3)
    ca, cc = a.client(), c.client()
    status = [w.client(zero_copy=False) for w in (a, b, c)]

    def waiters() -> int:  # long polls blocked at the name's owner, wherever it is
        return sum(s.stats()["cluster"]["version_waiters"] for s in status)

    latencies = []
    for v in range(1, 21):
        waiting = threading.Event()
        done: dict = {}

        def wait(v: int = v, waiting: threading.Event = waiting, done: dict = done) -> None:
            waiting.set()
            done["version"] = cc.wait_version("lat", v, timeout=10)
            done["t"] = time.perf_counter()

        t = threading.Thread(target=wait)
        t.start()
        waiting.wait(5)
        wait_until(lambda: waiters() == 1, timeout=5, what="C's wait_version blocked at the owner")
        start = time.perf_counter()
        ca.publish("lat", b"x" * 1024)
        t.join(10)
        assert done["version"] == v and done["t"] >= start  # it could not return before the publish
        latencies.append(done["t"] - start)
    assert statistics.median(latencies) < 0.050, latencies


@pytest.mark.timeout(180)
def test_a_held_version_stays_valid_and_is_reclaimed_only_after_release(cluster_of, metastore):
    a, b, c = cluster_of(metastore).start(3)
    ca, cb, cc = a.client(), b.client(), c.client()
    size = 4 * MIB
    for v in (1, 2):
        ca.publish("p", payload(v, size))
    held = cc.get_version("p", 2).value  # a zero-copy view of C's copy (C's arena usage shows it below)
    for v in range(3, 7):
        ca.publish("p", payload(v, size))
        assert np.array_equal(held, payload(2, size))  # valid while newer versions arrive
    with pytest.raises(VersionGone):
        cb.get_version("p", 2)  # gone from the history ...
    used_while_held = dram_used(cc)
    assert np.array_equal(held, payload(2, size))  # ... but its bytes stay for the reader holding them
    del held
    gc.collect()
    cc.flush_releases()
    wait_until(lambda: dram_used(cc) <= used_while_held - size, timeout=10, what="version 2 reclaimed on C")


@pytest.mark.timeout(180)
def test_a_new_version_reaches_many_workers_through_the_relay(cluster_of, metastore):
    """4 workers x 2 readers read a new version at once: the publisher sends at most 2 copies,
    each worker pulls one copy, and its two readers share it."""
    cluster = cluster_of(metastore, shm="64MiB")
    publisher, *others = cluster.start(5)
    cp = publisher.client()
    readers = [w.client() for w in others for _ in range(2)]
    size = 9 * MIB  # three 4 MiB chunks: relays forward chunks while still receiving

    def served(c) -> int:
        return c.stats()["cluster"]["counters"]["bytes_served"]

    for round_ in range(2):
        value = payload(round_, size)
        before = served(cp)
        relayed_before = sum(served(c) for c in readers[::2])
        version = cp.publish("model", value)
        barrier = threading.Barrier(len(readers))
        results: list = [None] * len(readers)

        def read(i: int, barrier: threading.Barrier = barrier, results: list = results,
                 value: np.ndarray = value, version: int = version) -> None:
            barrier.wait()
            try:
                got = readers[i].get_version("model", version)
                results[i] = np.array_equal(got.value, value)
            except Exception as exc:  # noqa: BLE001
                results[i] = exc

        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(readers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [True] * len(readers)
        sent = served(cp) - before
        relayed = sum(served(c) for c in readers[::2]) - relayed_before
        assert len(value) <= sent <= 2 * len(value), f"publisher sent {sent / len(value):.2f}x the version"
        assert sent + relayed == 4 * len(value)  # one copy per worker, whoever sent it
        for c in readers:
            c.flush_releases()


@pytest.mark.timeout(120)
def test_a_restarted_head_puts_the_durable_versions_it_recovered_from_l2_back_into_the_history(tmp_path):
    from store_helpers import WorkerProcess

    from kilorl.store import WriteMode

    args = ["--shm-size", "64MiB", "--l2-dir", str(tmp_path / "l2"), "--keep-versions", "3", "--head"]
    w = WorkerProcess(tmp_path, *args, name="head").start()
    try:
        with w.client() as c:
            for v in range(1, 5):
                c.publish("p", payload(v, 4096), version=v, write_mode=WriteMode.WRITE_THROUGH_L2)
            c.publish("scratch", payload(9, 4096), version=1)  # not durable: gone after the restart
        port = w.port
        w.kill9()
        w = WorkerProcess(tmp_path, *args, "--port", str(port), name="head").start()  # same port, empty memory
        assert w.port == port
        with w.client() as c:
            assert c.latest_version("p") == 4 and c.latest_version("scratch") is None
            np.testing.assert_array_equal(np.asarray(c.get_version("p").value), payload(4, 4096))
            np.testing.assert_array_equal(np.asarray(c.get_version("p", 2).value), payload(2, 4096))
            with pytest.raises(VersionGone):  # only the newest keep_versions were kept
                c.get_version("p", 1)
            assert c.stats()["cluster"]["counters"]["versions_recovered"] == 3
            c.publish("p", payload(5, 4096), version=5)  # the history goes on from the recovered one
            with pytest.raises(InvalidRequest):
                c.publish("p", payload(4, 4096), version=4)
    finally:
        if w.alive():
            w.proc.kill()
            w.proc.wait(10)
        w.remove_arena()


@pytest.mark.timeout(180)
def test_the_newest_version_whose_bytes_died_with_their_worker_can_be_published_again_under_its_number(cluster_of):
    """The history outlives the bytes (replicated on the survivors); a publisher restores the
    version its readers wait for under the same number, and only while no worker holds it."""
    from kilorl.store import ObjectLost

    cluster = cluster_of("builtin")
    a, b, c = cluster.start(3)
    with b.client() as cb:  # B holds the bytes of both versions; nobody read them elsewhere
        for v in (1, 2):
            cb.publish("p", payload(v, 4096), version=v)
    b.kill9()
    cluster.members.remove(b)
    cluster.wait_ring(2)
    with c.client() as cc, a.client() as ca:
        assert cc.latest_version("p") == 2  # the history survived B
        with pytest.raises(ObjectLost):
            cc.get_version("p", 2)
        with pytest.raises(InvalidRequest, match="not newer"):
            cc.publish("p", payload(1, 4096), version=1)  # only the newest number is restored
        assert cc.publish("p", payload(2, 4096), version=2) == 2
        assert ca.latest_version("p") == 2  # restored in place: no second entry
        for reader in (ca, cc):
            np.testing.assert_array_equal(np.asarray(reader.get_version("p", 2).value), payload(2, 4096))
        with pytest.raises(InvalidRequest, match="not newer"):
            ca.publish("p", payload(7, 4096), version=2)  # held again: the number is taken as before
        assert ca.publish("p", payload(3, 4096), version=3) == 3
