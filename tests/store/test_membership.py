"""Membership on a builtin metastore and on a real etcd: joins, leaves, failures, epochs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from kilorl.store.mesh.membership import (
    MalformedRing,
    MemberIdInUse,
    MemberInfo,
    Membership,
    MembershipConfig,
    MembershipError,
    MeshView,
    RingChange,
    RingState,
    update_ring,
)
from kilorl.store.mesh.ring import HashRing, diff, key_position
from kilorl.store.metastore import MetastoreUnavailable, open_metastore
from kilorl.store.metastore.etcd_process import EtcdProcess
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)

MEMBER_PROC = Path(__file__).with_name("member_proc.py")
SAMPLE = [key_position(f"k{i}") for i in range(5000)]


class Backend:
    """Hands out metastore clients: the one shared builtin, or a new etcd client each time."""

    def __init__(self, kind: str, url: str, token: str | None = None):
        self.kind, self.url, self.token = kind, url, token
        self.ttl = 2.0 if kind == "etcd" else 1.0  # etcd's minimum lease TTL is 2 s
        self._shared = open_metastore("builtin") if kind == "builtin" else None
        self._opened = []

    def store(self):
        if self._shared is not None:
            return self._shared
        if self.kind == "remote":  # the built-in metastore served by a --head worker
            from kilorl.store.metastore.remote import RemoteMetastore

            s = RemoteMetastore(self.url, self.token)
        else:
            s = open_metastore(self.url)
        self._opened.append(s)
        return s

    def close(self):
        for s in self._opened:
            s.close()
        if self._shared is not None:
            self._shared.close()


@pytest.fixture(params=["builtin", "etcd", "remote"])
def backend(request):
    if request.param == "remote":
        head = request.getfixturevalue("head_worker")
        b = Backend("remote", head.address, head.token)
    else:
        b = Backend(request.param, "builtin" if request.param == "builtin" else request.getfixturevalue("etcd_server").url)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def config(backend) -> MembershipConfig:
    return MembershipConfig(prefix=f"/kilorl/test-{uuid.uuid4().hex}/", lease_ttl=backend.ttl)


def _member(backend, config, member_id: str) -> Membership:
    return Membership(backend.store(), MemberInfo(member_id, f"127.0.0.1:{abs(hash(member_id)) % 60000}"), config)


def _recorder(view: MeshView) -> list[RingChange]:
    changes: list[RingChange] = []
    view.subscribe(changes.append)
    return changes


def _assert_moves_match_brute_force(change: RingChange, replicas: int = 1) -> None:
    assert change.moves == diff(change.old.ring, change.new.ring, replicas)
    for p in SAMPLE:
        old = change.old.ring.successors_of_position(p, replicas) if len(change.old.ring) else []
        new = change.new.ring.successors_of_position(p, replicas) if len(change.new.ring) else []
        covering = [m for m in change.moves if p in m]
        if old != new:
            assert len(covering) == 1 and list(covering[0].new_owners) == new
        else:
            assert covering == []


def test_join_and_leave_commit_one_epoch_each(backend, config):
    view = MeshView(backend.store(), config).start()
    changes = _recorder(view)
    a, b = _member(backend, config, "a"), _member(backend, config, "b")
    try:
        assert a.join().ring.members == ["a"]
        state = b.join()
        assert (state.epoch, state.ring.members) == (2, ["a", "b"])
        view.wait_for(lambda s: s.epoch == 2, timeout=10)
        assert set(view.members) == {"a", "b"} and view.members["b"].address == b.member.address
        left = b.leave()
        assert (left.epoch, left.ring.members) == (3, ["a"])
        view.wait_for(lambda s: s.epoch == 3, timeout=10)
        assert backend.store().get(config.member_key("b")) is None
        assert [(c.new.epoch, c.joined, c.left) for c in changes] == [
            (1, ["a"], []),
            (2, ["b"], []),
            (3, [], ["b"]),
        ]
        for change in changes:
            _assert_moves_match_brute_force(change)
        # b's join took about half of the space from a, and its leave gave it back.
        assert all(m.source == "a" and m.target == "b" for m in changes[1].moves)
        assert abs(sum(m.size for m in changes[1].moves) / 2**64 - 0.5) < 0.1
    finally:
        a.leave()
        view.close()


def test_concurrent_joins_from_threads_keep_every_member(backend, config):
    n = 8
    view = MeshView(backend.store(), config).start()
    changes = _recorder(view)
    members = [_member(backend, config, f"w{i}") for i in range(n)]
    barrier = threading.Barrier(n)
    errors = []

    def run(m, action):
        try:
            barrier.wait(timeout=30)
            action(m)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    def all_do(action):
        threads = [threading.Thread(target=run, args=(m, action)) for m in members]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    try:
        all_do(lambda m: m.join())
        assert errors == []
        state = view.wait_for(lambda s: len(s.ring) == n, timeout=15)
        # Exactly one epoch per join: no update lost, none applied twice.
        assert state.epoch == n and sorted(state.ring.members) == sorted(m.member.id for m in members)
        assert [c.new.epoch for c in changes] == list(range(1, n + 1))
        all_do(lambda m: m.leave())
        assert errors == []
        state = view.wait_for(lambda s: len(s.ring) == 0, timeout=15)
        assert state.epoch == 2 * n
        assert backend.store().range(config.members_prefix).kvs == []
    finally:
        view.close()


def test_member_whose_heartbeat_stops_is_removed_within_seconds(backend, config):
    view = MeshView(backend.store(), config).start()
    changes = _recorder(view)
    survivors = [_member(backend, config, name) for name in ("a", "b")]
    doomed = _member(backend, config, "c")
    try:
        for m in (*survivors, doomed):
            m.join()
        view.wait_for(lambda s: len(s.ring) == 3, timeout=10)
        stopped = time.monotonic()
        doomed.abandon()  # no leave, no revoke: only the lease expiry tells the others
        state = view.wait_for(lambda s: "c" not in s.ring, timeout=config.lease_ttl + 5)
        elapsed = time.monotonic() - stopped
        assert elapsed < config.lease_ttl + 3, elapsed
        assert state.ring.members == ["a", "b"] and state.epoch == 4
        change = changes[-1]
        assert change.left == ["c"] and change.new.epoch == 4
        assert all(m.source == "c" and m.target in ("a", "b") for m in change.moves)
        _assert_moves_match_brute_force(change)
    finally:
        for m in survivors:
            m.leave()
        view.close()


def test_graceful_leave_hands_off_before_deregistering(backend, config):
    a, b = _member(backend, config, "a"), _member(backend, config, "b")
    a.join()
    b.join()
    seen = {}

    def handoff(change: RingChange) -> None:
        store = backend.store()
        seen["change"] = change
        seen["record_during"] = store.get(config.member_key("b")) is not None
        seen["ring_during"] = RingChangeProbe.ring_members(store, config)

    try:
        b.leave(handoff=handoff)
        change = seen["change"]
        assert seen["record_during"] is True  # peers can still reach b while it hands off
        assert seen["ring_during"] == ["a"]  # but b no longer owns anything
        assert change.left == ["b"] and all(m.source == "b" and m.target == "a" for m in change.moves)
        _assert_moves_match_brute_force(change)
        assert backend.store().get(config.member_key("b")) is None
    finally:
        a.leave()


class RingChangeProbe:
    @staticmethod
    def ring_members(store, config) -> list[str]:
        import json

        kv = store.get(config.ring_key)
        return sorted(json.loads(kv.value)["members"]) if kv else []


def test_member_that_loses_its_lease_rejoins(backend, config):
    view = MeshView(backend.store(), config).start()
    changes = _recorder(view)
    a, b = _member(backend, config, "a"), _member(backend, config, "b")
    try:
        a.join()
        b.join()
        backend.store().revoke(b.lease_id)  # as if b had paused past its TTL
        view.wait_for(lambda s: s.epoch >= 4 and "b" in s.ring, timeout=config.lease_ttl + 10)
        assert [(c.joined, c.left) for c in changes[-2:]] == [([], ["b"]), (["b"], [])]
        deadline = time.monotonic() + 5
        while b.rejoins == 0 and time.monotonic() < deadline:  # counted just after the ring commit
            time.sleep(0.02)
        assert b.rejoins == 1
        assert backend.store().get(config.member_key("b")) is not None
    finally:
        b.leave()
        a.leave()
        view.close()


def test_duplicate_live_id_is_rejected_and_restart_waits_out_the_old_lease(backend, config):
    a = _member(backend, config, "a")
    a.join()
    try:
        with pytest.raises(MemberIdInUse, match="'a'"):
            _member(backend, config, "a").join(wait_for_stale=False)
        a.abandon()  # crash ...
        restarted = _member(backend, config, "a")
        state = restarted.join()  # ... and restart with the same id before the old lease expired
        assert state.ring.members == ["a"]
        assert backend.store().get(config.member_key("a")).lease == restarted.lease_id
        restarted.leave()
    finally:
        a.abandon()


def test_bad_member_and_config_input_names_the_field():
    with pytest.raises(ValueError, match="member id"):
        MemberInfo("bad/id", "127.0.0.1:1")
    with pytest.raises(ValueError, match="address"):
        MemberInfo("ok", "")
    with pytest.raises(ValueError, match="prefix"):
        MembershipConfig(prefix="/no-trailing-slash")
    with pytest.raises(ValueError, match="lease_ttl"):
        MembershipConfig(lease_ttl=0)


def _spawn_member(url: str, member_id: str, config: MembershipConfig) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(MEMBER_PROC), url, member_id, config.prefix, str(config.lease_ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _kill_all(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


def test_concurrent_joins_from_processes_on_etcd(etcd_server):  # noqa: F811
    config = MembershipConfig(prefix=f"/kilorl/test-{uuid.uuid4().hex}/", lease_ttl=2)
    store = open_metastore(etcd_server.url)
    view = MeshView(store, config).start()
    changes = _recorder(view)
    procs = [_spawn_member(etcd_server.url, f"p{i}", config) for i in range(4)]
    try:
        for p in procs:
            assert p.stdout.readline().startswith("JOINED"), "member process failed to join"
        state = view.wait_for(lambda s: len(s.ring) == 4, timeout=15)
        assert state.ring.members == ["p0", "p1", "p2", "p3"] and state.epoch == 4
        assert [c.new.epoch for c in changes] == [1, 2, 3, 4]
        for p in procs:
            p.stdin.close()
        for p in procs:
            assert p.wait(timeout=30) == 0
        assert view.wait_for(lambda s: len(s.ring) == 0, timeout=15).epoch == 8
    finally:
        _kill_all(procs)
        view.close()
        store.close()


def test_kill_9_member_process_is_removed_on_etcd(etcd_server):  # noqa: F811
    config = MembershipConfig(prefix=f"/kilorl/test-{uuid.uuid4().hex}/", lease_ttl=2)
    store = open_metastore(etcd_server.url)
    survivor = Membership(store, MemberInfo("a", "127.0.0.1:1"), config)
    survivor.join()
    changes = _recorder(survivor.view)
    proc = _spawn_member(etcd_server.url, "b", config)
    try:
        assert proc.stdout.readline().startswith("JOINED")
        survivor.view.wait_for(lambda s: "b" in s.ring, timeout=10)
        killed = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)
        state = survivor.view.wait_for(lambda s: "b" not in s.ring, timeout=config.lease_ttl + 6)
        assert time.monotonic() - killed < config.lease_ttl + 4
        assert state.ring.members == ["a"]
        change = changes[-1]
        assert change.left == ["b"] and all(m.source == "b" and m.target == "a" for m in change.moves)
        _assert_moves_match_brute_force(change)
    finally:
        _kill_all([proc])
        survivor.leave()
        store.close()


def test_view_catches_up_after_etcd_restarts(tmp_path):
    config = MembershipConfig(prefix="/kilorl/restart/", lease_ttl=2)
    with EtcdProcess(data_dir=tmp_path / "etcd") as etcd:
        watcher_store, writer = open_metastore(etcd.url), open_metastore(etcd.url)
        view = MeshView(watcher_store, config).start()
        changes = _recorder(view)
        try:
            for name in ("x", "y"):  # lease-less records: these members survive the outage
                writer.put(config.member_key(name), MemberInfo(name, "127.0.0.1:1").to_bytes())
            update_ring(writer, config, lambda ring, live: ring.with_member("x"))
            view.wait_for(lambda s: s.epoch == 1, timeout=10)
            etcd.kill()  # kill -9: the view's watch stream breaks
            etcd.start()  # same ports, same data
            deadline = time.monotonic() + 20
            while True:
                try:
                    update_ring(writer, config, lambda ring, live: ring.with_member("y"))
                    break
                except MetastoreUnavailable:
                    assert time.monotonic() < deadline, "etcd did not come back"
                    time.sleep(0.1)
            state = view.wait_for(lambda s: s.epoch == 2, timeout=20)
            assert state.ring.members == ["x", "y"] and view.resyncs >= 1
            assert (changes[-1].old.ring.members, changes[-1].new.ring.members) == (["x"], ["x", "y"])
            _assert_moves_match_brute_force(changes[-1])
        finally:
            view.close()
            watcher_store.close()
            writer.close()


def test_join_twice_is_an_error_and_a_failed_join_leaves_nothing_behind(backend, config, monkeypatch):
    a = _member(backend, config, "a")
    a.join()
    try:
        with pytest.raises(MembershipError, match="already joined"):
            a.join()
    finally:
        a.leave()
    store = backend.store()
    broken = Membership(store, MemberInfo("b", "127.0.0.1:2"), config)

    def outage():  # the metastore goes away between registration and the watch
        raise MetastoreUnavailable("injected outage")

    monkeypatch.setattr(broken.view, "start", outage)
    with pytest.raises(MetastoreUnavailable, match="injected"):
        broken.join()
    assert store.get(config.member_key("b")) is None  # its lease was revoked on the way out


def test_malformed_ring_record_is_reported_and_the_view_keeps_the_last_good_ring(backend, config):
    a = _member(backend, config, "a")
    a.join()
    view = MeshView(backend.store(), config).start()
    try:
        store = backend.store()
        store.put(config.ring_key, b"{not json")
        with pytest.raises(MalformedRing, match="malformed"):
            update_ring(store, config, lambda ring, live: ring)
        # Events arrive in order: once the view has seen this later record, it has
        # also processed the malformed ring.
        store.put(config.member_key("marker"), MemberInfo("marker", "127.0.0.1:9").to_bytes())
        deadline = time.monotonic() + 10
        while "marker" not in view.members and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "marker" in view.members
        assert view.error is None and view.state.ring.members == ["a"]
        # An operator repairs the record: the view follows again.
        good = RingState(7, HashRing({"a": 1.0}))
        store.put(config.ring_key, good.to_bytes())
        assert view.wait_for(lambda s: s.epoch == 7, timeout=10).ring.members == ["a"]
    finally:
        view.close()
        a.abandon()
