"""Metastore contract, run against the builtin backend and a real etcd server."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from kilorl.store.metastore import (
    CompactedError,
    LeaseKeeper,
    LeaseNotFound,
    MetastoreUnavailable,
    WatchClosed,
    open_metastore,
)
from kilorl.store.metastore.builtin import BuiltinMetastore
from kilorl.store.metastore.etcd_process import free_port
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)


@pytest.fixture(params=["builtin", "etcd", "remote"])
def store(request):
    if request.param == "builtin":
        s = open_metastore("builtin")
    elif request.param == "remote":
        from kilorl.store.metastore.remote import RemoteMetastore

        head = request.getfixturevalue("head_worker")
        s = RemoteMetastore(head.address, head.token)
    else:
        s = open_metastore(request.getfixturevalue("etcd_server").url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def ns() -> bytes:
    """A key prefix of our own: tests share one etcd."""
    return f"/t/{uuid.uuid4().hex}/".encode()


def _events(watch, count, timeout=10.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        batch = watch.get(timeout=max(0.01, deadline - time.monotonic()))
        got.extend(batch or ())
    return got


def _wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_put_get_and_revisions(store, ns):
    assert store.get(ns + b"k") is None
    r1 = store.put(ns + b"k", b"v1")
    r2 = store.put(ns + b"k", b"v2")
    assert r2 > r1 >= 2
    kv = store.get(ns + b"k")
    assert (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"v2", r1, r2, 2)
    assert store.revision() >= r2
    store.put(ns + b"empty", b"")
    assert store.get(ns + b"empty").value == b""
    binary = bytes(range(256))
    store.put(ns + b"\x00\xff", binary)
    assert store.get(ns + b"\x00\xff").value == binary


def test_range_by_prefix_is_sorted_and_exact(store, ns):
    for k in (b"a/2", b"a/1", b"a/3", b"a0", b"b/1"):
        store.put(ns + k, k)
    result = store.range(ns + b"a/")
    assert [kv.key for kv in result.kvs] == [ns + b"a/1", ns + b"a/2", ns + b"a/3"]
    assert result.revision == store.revision()
    assert len(store.range(ns).kvs) == 5
    assert store.range(ns + b"zzz").kvs == []


def test_delete_and_delete_prefix(store, ns):
    for k in (b"x/1", b"x/2", b"y"):
        store.put(ns + k, b"1")
    assert store.delete(ns + b"y") is True
    assert store.delete(ns + b"y") is False
    assert store.delete_prefix(ns + b"x/") == 2
    assert store.range(ns).kvs == []


def test_compare_and_swap(store, ns):
    key = ns + b"ring"
    created = store.compare_and_swap(key, 0, b"v1")  # create only if absent
    assert created.succeeded and created.current.value == b"v1"
    again = store.compare_and_swap(key, 0, b"other")
    assert not again.succeeded and again.current.value == b"v1"
    rev = created.current.mod_revision
    swapped = store.compare_and_swap(key, rev, b"v2")
    assert swapped.succeeded and swapped.current.mod_revision > rev
    stale = store.compare_and_swap(key, rev, b"v3")
    assert not stale.succeeded and stale.current.value == b"v2"
    assert store.get(key).value == b"v2"
    bad_delete = store.compare_and_delete(key, rev)
    assert not bad_delete.succeeded and store.get(key) is not None
    assert store.compare_and_delete(key, swapped.current.mod_revision).succeeded
    assert store.get(key) is None


def test_concurrent_cas_increments_lose_nothing(store, ns):
    key = ns + b"counter"
    store.put(key, b"0")
    threads, per_thread = 4, 15

    def work():
        done = 0
        while done < per_thread:
            kv = store.get(key)
            if store.compare_and_swap(key, kv.mod_revision, str(int(kv.value) + 1).encode()).succeeded:
                done += 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert int(store.get(key).value) == threads * per_thread


def test_lease_revoke_deletes_attached_keys(store, ns):
    lease = store.grant_lease(10)
    assert lease.id > 0 and lease.ttl >= 10
    store.put(ns + b"a", b"1", lease=lease.id)
    store.put(ns + b"b", b"1", lease=lease.id)
    store.put(ns + b"keep", b"1")
    assert store.get(ns + b"a").lease == lease.id
    assert 0 < store.lease_time_to_live(lease.id) <= 10
    store.revoke(lease.id)
    assert [kv.key for kv in store.range(ns).kvs] == [ns + b"keep"]
    assert store.lease_time_to_live(lease.id) == -1
    with pytest.raises(LeaseNotFound):
        store.revoke(lease.id)
    with pytest.raises(LeaseNotFound):
        store.keepalive(lease.id)


def test_put_with_unknown_lease_fails(store, ns):
    with pytest.raises(LeaseNotFound):
        store.put(ns + b"a", b"1", lease=123456789)
    assert store.get(ns + b"a") is None


def test_lease_expiry_deletes_keys_and_keepalive_prevents_it(store, ns):
    dying = store.grant_lease(1)  # etcd rounds its minimum up to 2 s
    kept = store.grant_lease(1)
    store.put(ns + b"dying", b"1", lease=dying.id)
    store.put(ns + b"kept", b"1", lease=kept.id)
    keeper = LeaseKeeper(store, kept.id, kept.ttl).start()
    try:
        started = time.monotonic()
        assert _wait_until(lambda: store.get(ns + b"dying") is None, timeout=kept.ttl + 4)
        assert time.monotonic() - started >= dying.ttl - 1.0  # not before its TTL
        # Kept alive well past its TTL.
        time.sleep(kept.ttl + 0.5)
        assert store.get(ns + b"kept") is not None
        assert keeper.alive and keeper.lost is None
    finally:
        keeper.stop()
    with pytest.raises(LeaseNotFound):
        store.keepalive(dying.id)
    assert _wait_until(lambda: store.get(ns + b"kept") is None, timeout=kept.ttl + 4)


def test_keeper_reports_a_revoked_lease(store):
    lease = store.grant_lease(3)
    lost = threading.Event()
    keeper = LeaseKeeper(store, lease.id, 0.6, on_lost=lambda exc: lost.set()).start()
    try:
        store.revoke(lease.id)
        assert lost.wait(5)
        assert isinstance(keeper.lost, LeaseNotFound)
    finally:
        keeper.stop()


def test_watch_delivers_changes_in_order_for_the_prefix_only(store, ns):
    with store.watch(ns + b"w/") as watch:
        r1 = store.put(ns + b"w/a", b"1")
        store.put(ns + b"other", b"x")
        r2 = store.put(ns + b"w/a", b"2")
        r3 = store.put(ns + b"w/b", b"3")
        store.delete(ns + b"w/a")
        events = _events(watch, 4)
    assert [(e.type, e.kv.key, e.kv.value) for e in events] == [
        ("PUT", ns + b"w/a", b"1"),
        ("PUT", ns + b"w/a", b"2"),
        ("PUT", ns + b"w/b", b"3"),
        ("DELETE", ns + b"w/a", b""),
    ]
    assert [e.kv.mod_revision for e in events[:3]] == [r1, r2, r3]
    assert events[3].kv.mod_revision > r3
    with pytest.raises(WatchClosed):
        watch.get(timeout=1)


def test_watch_replays_from_a_past_revision(store, ns):
    first = store.put(ns + b"a", b"1")
    store.put(ns + b"b", b"2")
    with store.watch(ns, start_revision=first) as watch:
        store.put(ns + b"c", b"3")
        events = _events(watch, 3)
    assert [e.kv.key for e in events] == [ns + b"a", ns + b"b", ns + b"c"]


def test_watch_sees_lease_expiry_as_delete(store, ns):
    lease = store.grant_lease(1)
    store.put(ns + b"member", b"alive", lease=lease.id)
    with store.watch(ns) as watch:
        events = _events(watch, 1, timeout=lease.ttl + 5)
    assert [(e.type, e.kv.key) for e in events] == [("DELETE", ns + b"member")]


def test_bad_input_names_the_field(store, ns):
    with pytest.raises(TypeError, match="key must be bytes"):
        store.put("text", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value must be bytes"):
        store.put(ns + b"k", "v")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key must not be empty"):
        store.get(b"")
    with pytest.raises(ValueError, match="ttl"):
        store.grant_lease(0)


def test_builtin_watch_from_compacted_revision_fails():
    store = BuiltinMetastore(history=5)
    try:
        first = store.put(b"k", b"0")
        for i in range(10):
            store.put(b"k", str(i).encode())
        with pytest.raises(CompactedError):
            store.watch(b"k", start_revision=first)
        with store.watch(b"k", start_revision=store.revision()) as watch:
            assert [e.kv.value for e in _events(watch, 1)] == [b"9"]
    finally:
        store.close()


def test_open_metastore_rejects_unknown_urls():
    with pytest.raises(ValueError, match="builtin"):
        open_metastore("zookeeper://x")
    with pytest.raises(ValueError, match="etcd://HOST:PORT"):
        open_metastore("etcd://")


def test_unreachable_etcd_raises_a_clear_error():
    store = open_metastore(f"etcd://127.0.0.1:{free_port()}", timeout=2.0)
    try:
        with pytest.raises(MetastoreUnavailable, match="unreachable"):
            store.get(b"k")
        with pytest.raises(MetastoreUnavailable):
            store.watch(b"k")
    finally:
        store.close()


def test_etcd_watch_from_compacted_revision_fails(etcd_server, ns):  # noqa: F811
    import http.client
    import json

    store = open_metastore(etcd_server.url)
    try:
        first = store.put(ns + b"k", b"0")
        last = store.put(ns + b"k", b"1")
        conn = http.client.HTTPConnection("127.0.0.1", etcd_server.client_port, timeout=5)
        conn.request("POST", "/v3/kv/compaction", json.dumps({"revision": str(last), "physical": True}))
        assert conn.getresponse().status == 200
        conn.close()
        with store.watch(ns, start_revision=first) as watch:
            with pytest.raises(CompactedError, match="compacted"):
                watch.get(timeout=10)
    finally:
        store.close()
