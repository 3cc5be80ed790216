"""Store workers as one cluster: 3-4 real worker processes, built-in metastore and real etcd.

Each test runs once per metastore (``builtin``: the first worker is ``--head``; ``etcd``:
a real etcd server started by the session fixture). All workers share one L2 directory.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import numpy as np
import pytest
from store_helpers import wait_until

from kilorl.store import KeyNotFound, ObjectLost, WriteMode
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)


@pytest.fixture(params=["builtin", "etcd"])
def metastore(request) -> str:
    if request.param == "builtin":
        return "builtin"
    return request.getfixturevalue("etcd_server").url


def counters(client) -> dict:
    return client.stats()["cluster"]["counters"]


@pytest.mark.timeout(120)
def test_cross_worker_get_then_local_replica(cluster_of, metastore):
    cluster = cluster_of(metastore)
    a, b, c = cluster.start(3)
    ca, cb, cc = a.client(), b.client(), c.client()
    value = np.random.default_rng(0).integers(0, 256, 5 * 1024 * 1024 + 17, dtype=np.uint8)  # two chunks
    ca.set("obj", value)
    ca.set("small", b"hello")
    for client in (cb, cc):
        got = client.get("obj")
        assert np.array_equal(got, value)
        assert not got.flags.writeable  # a zero-copy view of the reading worker's own arena
        assert bytes(client.get("small")) == b"hello"
    served = counters(ca)["bytes_served"]
    assert served >= value.nbytes  # the holder sent the bytes at least once ...
    pulls_b = counters(cb)["remote_gets"]
    again = cb.get("obj")
    assert np.array_equal(again, value)
    assert counters(cb)["remote_gets"] == pulls_b  # ... and the second read on B was local
    assert counters(ca)["bytes_served"] == served
    assert cb.locate("obj")["tier"] == "dram"
    del got, again

    cc.set("obj", b"version 2")  # a new version through another worker invalidates the replicas
    for client in (ca, cb, cc):
        assert bytes(client.get("obj")) == b"version 2"
    assert cb.delete("obj") == 1
    for client in (ca, cb, cc):
        with pytest.raises(KeyNotFound):
            client.get("obj")
        assert not client.exists("obj")
    assert cc.exists("small") and cb.exists("small")
    for client in (ca, cb, cc):
        client.close()


@pytest.mark.timeout(150)
def test_kill9_recovers_write_through_keys_from_shared_l2(cluster_of, metastore):
    cluster = cluster_of(metastore)
    head, other, victim = cluster.start(3)
    cv = victim.client()
    n = 1000
    for i in range(n):
        cv.set(f"durable/{i}", f"value-{i}".encode(), write_mode=WriteMode.WRITE_THROUGH_L2)
    cv.set("volatile", b"held only in the victim's memory")
    cv.set("flushed", b"written back before the crash", write_mode=WriteMode.WRITE_BACK_L2)
    wait_until(lambda: cv.locate("flushed")["l2_durable"], 10, what="write-back flush")
    survivors = [head.client(), other.client()]
    assert bytes(survivors[0].get("durable/7")) == b"value-7"

    victim.kill9()
    killed = time.monotonic()
    for i in range(n):
        assert bytes(survivors[i % 2].get(f"durable/{i}")) == f"value-{i}".encode()
    read_all = time.monotonic() - killed
    assert read_all < 10.0, f"reading {n} keys after kill -9 took {read_all:.1f}s"
    assert bytes(survivors[1].get("flushed")) == b"written back before the crash"

    t0 = time.monotonic()
    with pytest.raises(ObjectLost, match="volatile"):
        survivors[1].get("volatile")
    assert time.monotonic() - t0 < 15.0  # within the worker's bound on a remote get, never a hang

    cluster.wait_ring(2, timeout=cluster.lease_ttl + 6)  # the lease ran out: ranges moved
    detected = time.monotonic() - killed
    assert detected < cluster.lease_ttl + 6
    ring = cluster.ring(head)
    assert victim.address not in ring["ring"]["members"]
    for i in range(0, n, 97):  # still readable once the ranges moved
        assert bytes(survivors[(i + 1) % 2].get(f"durable/{i}")) == f"value-{i}".encode()
    assert bytes(cv.get("durable/3")) == b"value-3"  # the victim's own client moved to a survivor
    assert cv.failovers == 1 and cv.address != victim.address
    for c in [*survivors, cv]:
        c.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scale_out_and_in_under_load(cluster_of, metastore):
    """2 -> 4 -> 2 workers while a client loop does 10,000 set/get pairs across workers."""
    cluster = cluster_of(metastore)
    cluster.start(2)
    clients = [w.client() for w in cluster.members]
    n = 10_000
    done = [0]
    failures: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        for i in range(n):
            if stop.is_set():
                return
            pool = list(clients)
            value = f"value-{i}".encode() * (1 + i % 7)
            try:
                pool[i % len(pool)].set(f"k/{i}", value)
                got = bytes(pool[(i + 1) % len(pool)].get(f"k/{i}"))
                if got != value:
                    failures.append(f"k/{i}: read {got[:20]!r}")
            except Exception as exc:  # noqa: BLE001 - every failure is reported below
                failures.append(f"k/{i}: {exc!r}")
            done[0] = i + 1

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        wait_until(lambda: done[0] >= n // 5 or not t.is_alive(), 120, interval=0.05, what="first fifth")
        joiners = [cluster.add(), cluster.add()]
        cluster.wait_ring(4)
        # the joiners took over ring ranges: the records of keys written so far moved to them
        wait_until(lambda: all(cluster.ring(w)["counters"]["records_received"] > 100 for w in joiners), 30,
                   interval=0.05, what="records migrated to the joiners")
        clients += [w.client() for w in joiners]
        wait_until(lambda: done[0] >= 3 * n // 5 or not t.is_alive(), 120, interval=0.05, what="three fifths")
        for w in joiners:
            w.proc.send_signal(signal.SIGTERM)  # graceful leave: hand records and objects over
        for w in joiners:
            assert w.proc.wait(60) == 0
        handed = [re.search(r"handed off (\d+) objects", w.read_log()) for w in joiners]
        assert all(handed) and sum(int(m.group(1)) for m in handed) > 0  # objects written through them moved
        cluster.wait_ring(2)
        t.join(180)
    finally:
        stop.set()
    assert not t.is_alive()
    assert done[0] == n
    assert failures == []
    lost = []
    for i in range(n):
        value = f"value-{i}".encode() * (1 + i % 7)
        try:
            if bytes(clients[i % 2].get(f"k/{i}")) != value:
                lost.append(i)
        except Exception as exc:  # noqa: BLE001
            lost.append((i, repr(exc)[:200]))
    assert lost == []
    assert sum(c.failovers for c in clients[2:]) >= 1  # clients of leaving workers moved on


@pytest.mark.timeout(90)
def test_status_shows_ring_members_and_usage(cluster_of):
    import subprocess
    import sys

    from store_helpers import TOKEN

    cluster = cluster_of("builtin")
    members = cluster.start(3)
    with members[1].client() as c:
        for i in range(30):
            c.set(f"s/{i}", b"x" * 1000)
    out = subprocess.run([sys.executable, "-m", "kilorl.cli.main", "store", "status", "--port", str(members[0].port),
                          "--token", TOKEN], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ring epoch 3" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.strip().startswith("127.0.0.1:")]
    assert sorted(r.split()[0] for r in rows) == sorted(w.address for w in members)
    assert all("unreachable" not in r for r in rows)
    shares = [float(r.split()[2].rstrip("%")) for r in rows]
    assert abs(sum(shares) - 100.0) < 0.5 and min(shares) > 15
    primaries = {r.split()[0]: int(r.split()[6]) for r in rows}
    assert primaries[members[1].address] == 30  # the 30 objects live where they were written


@pytest.mark.timeout(60)
def test_bad_cluster_requests_get_errors_and_the_worker_keeps_serving(cluster_of):
    from store_helpers import TOKEN

    from kilorl.store.errors import InvalidRequest, StoreError
    from kilorl.store.wire.peers import PeerConn

    cluster = cluster_of("builtin")
    a, b = cluster.start(2)
    with a.client() as c:
        c.set("good", b"still here")
    conn = PeerConn(b.address, TOKEN)
    with pytest.raises(StoreError):  # records payload that is not msgpack
        conn.call({"op": "c.meta_copy"}, [b"\xc1\xc1 not msgpack"])
    with pytest.raises(InvalidRequest, match="key"):
        conn.call({"op": "c.locate", "key": 7})
    with pytest.raises(StoreError, match="off/len"):
        conn.call({"op": "c.fetch", "key": "good", "ver": 1, "off": -1, "len": 5})
    with pytest.raises(StoreError):  # a version nobody holds
        conn.call({"op": "c.fetch", "key": "good", "ver": 1, "off": 0, "len": 5})
    conn.close()
    head = PeerConn(a.address, TOKEN)  # the head's metastore ops validate their fields too
    with pytest.raises(InvalidRequest, match="key"):
        head.call({"op": "meta.get", "key": "not-bytes"})
    assert head.call({"op": "meta.revision"})[0]["rev"] > 1
    head.close()
    with pytest.raises(StoreError):  # a peer without the token is refused
        PeerConn(b.address, "wrong-token")
    with b.client() as c:
        assert bytes(c.get("good")) == b"still here"


@pytest.mark.timeout(120)
def test_fanout_relay_bounds_copies_sent_by_the_source(cluster_of):
    """4 workers x 2 readers read a new object at once: the source sends at most 2 copies."""
    cluster = cluster_of("builtin", shm="48MiB")
    source, *readers = cluster.start(5)
    cs = source.client()
    clients = [w.client() for w in readers for _ in range(2)]
    size = 9 * 1024 * 1024  # three 4 MiB chunks: relays forward chunks while receiving
    value = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
    for version in range(2):
        value[0] = version
        cs.set("param", value)
        before = counters(cs)["bytes_served"]
        relayed_before = sum(counters(c)["bytes_served"] for c in clients[::2])
        barrier = threading.Barrier(len(clients))
        results: list = [None] * len(clients)

        def read(i: int, barrier: threading.Barrier = barrier, results: list = results) -> None:
            barrier.wait()
            try:
                results[i] = np.array_equal(clients[i].get("param"), value)
            except Exception as exc:  # noqa: BLE001
                results[i] = exc

        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [True] * len(clients)
        sent = counters(cs)["bytes_served"] - before
        assert size <= sent <= 2 * size, f"source sent {sent / size:.2f}x the object"
        relayed = sum(counters(c)["bytes_served"] for c in clients[::2]) - relayed_before
        assert sent + relayed == 4 * size  # each of the 4 workers pulled exactly one copy
        assert relayed >= 2 * size  # the other two workers got theirs from relays
        for c in clients:
            c.flush_releases()
    for c in [cs, *clients]:
        c.close()


def test_bad_cluster_options_name_the_field(tmp_path):
    import subprocess
    import sys

    def start(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
                               "--shm-size", "8MiB", "--run-dir", str(tmp_path / "run"), *args],
                              capture_output=True, text=True, timeout=60)

    out = start("--head", "--join", "127.0.0.1:1", "--token", "t")
    assert out.returncode == 2 and "exactly one of --head" in out.stderr
    out = start("--head")  # a generated token cannot be shared with peers
    assert out.returncode == 2 and "token:" in out.stderr
    out = start("--metastore", "redis://x:1", "--token", "t")
    assert out.returncode == 2 and "metastore:" in out.stderr
    out = start("--head", "--token", "t", "--cluster-name", "a/b")
    assert out.returncode == 2 and "cluster_name:" in out.stderr


@pytest.mark.timeout(60)
def test_remote_get_of_an_object_in_the_holders_disk_tier(cluster_of, tmp_path):
    cluster = cluster_of("builtin", extra=("--disk-dir", str(tmp_path / "spill"), "--disk-size", "64MiB"))
    a, b = cluster.start(2)
    ca, cb = a.client(), b.client()
    value = np.random.default_rng(4).integers(0, 256, 9 * 1024 * 1024, dtype=np.uint8)
    ca.set("cold", value, tier="disk")
    assert ca.locate("cold")["tier"] == "disk"
    assert np.array_equal(cb.get("cold"), value)  # pulled chunk by chunk from A's spill file
    assert counters(ca)["bytes_served"] == value.nbytes
    assert ca.locate("cold")["tier"] == "disk"  # serving it did not move A's copy
    ca.close(), cb.close()


@pytest.mark.timeout(90)
def test_concurrent_writers_of_one_key_converge(cluster_of):
    """Writers on two workers overwrite one key while a third reads: no failed op, and at
    the end every worker reads the same value, one that was written."""
    cluster = cluster_of("builtin")
    a, b, c = cluster.start(3)
    errors: list[str] = []
    written = {f"{w}-{i}".encode() for w in "ab" for i in range(200)}

    def write(worker, tag: str) -> None:
        with worker.client() as cl:
            for i in range(200):
                try:
                    cl.set("hot", f"{tag}-{i}".encode())
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))

    def read() -> None:
        with c.client() as cl:
            for _ in range(200):
                try:
                    got = bytes(cl.get("hot", timeout=5))
                    if got not in written:
                        errors.append(f"read {got!r}")
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))

    threads = [threading.Thread(target=write, args=(a, "a")), threading.Thread(target=write, args=(b, "b")),
               threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    finals = set()
    for w in (a, b, c):
        with w.client() as cl:
            finals.add(bytes(cl.get("hot")))
    assert len(finals) == 1 and finals <= written
