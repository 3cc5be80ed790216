"""In-process metastore with etcd's semantics, for clusters without an etcd.

The head store worker hosts one instance and serves it to the other workers over
the store protocol; everything here is plain data in and out so that serving it
is a thin mapping of calls to frames. State lives in memory: if the head dies the
cluster metadata is rebuilt by the survivors re-registering (see
docs/store_cluster.md); use etcd when the metastore itself must survive.

Thread-safe: one lock guards all state; a reaper thread expires leases on time
even when no call arrives, and watchers get events pushed under that lock, so
they see every change in revision order.
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from dataclasses import dataclass, field, replace

from kilorl.store.metastore.base import (
    CasResult,
    CompactedError,
    KeyValue,
    Lease,
    LeaseNotFound,
    Metastore,
    MetastoreClosed,
    RangeResult,
    Watch,
    WatchEvent,
    check_key,
    check_ttl,
    check_value,
)


@dataclass
class _LeaseState:
    ttl: int
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class _BuiltinWatch(Watch):
    def __init__(self, prefix: bytes, owner: BuiltinMetastore):
        super().__init__(prefix)
        self._owner = owner

    def _cancel(self) -> None:
        self._owner._unregister(self)


def _check_prefix(prefix: bytes) -> bytes:
    if not isinstance(prefix, (bytes, bytearray)):
        raise TypeError(f"prefix must be bytes, got {type(prefix).__name__}")
    return bytes(prefix)


class BuiltinMetastore(Metastore):
    """Revisions, compare-and-swap, leases and watches in one process.

    Args:
        history: how many past revisions a watch may replay from; older start
            revisions raise CompactedError, like a compacted etcd.
    """

    def __init__(self, history: int = 10_000):
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self._cond = threading.Condition(threading.Lock())
        self._revision = 1  # like a fresh etcd: the first write gets revision 2
        self._kvs: dict[bytes, KeyValue] = {}
        self._leases: dict[int, _LeaseState] = {}
        self._history: collections.deque[tuple[int, list[WatchEvent]]] = collections.deque(maxlen=history)
        self._watchers: list[_BuiltinWatch] = []
        self._closed = False
        self._reaper = threading.Thread(target=self._reap_loop, name="metastore-lease-reaper", daemon=True)
        self._reaper.start()

    # -- internals (call with the lock held) ---------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MetastoreClosed("metastore is closed")

    def _commit(self, events: list[WatchEvent]) -> None:
        """Record one revision's events and push them to matching watchers."""
        self._history.append((self._revision, events))
        for watch in self._watchers:
            watch.push([e for e in events if e.kv.key.startswith(watch.prefix)])

    def _put_locked(self, key: bytes, value: bytes, lease: int) -> int:
        if lease and lease not in self._leases:
            raise LeaseNotFound(f"lease {lease} not found (expired or revoked)")
        self._revision += 1
        old = self._kvs.get(key)
        if old is not None and old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        kv = KeyValue(
            key=key,
            value=value,
            create_revision=old.create_revision if old else self._revision,
            mod_revision=self._revision,
            version=(old.version + 1) if old else 1,
            lease=lease,
        )
        self._kvs[key] = kv
        if lease:
            self._leases[lease].keys.add(key)
        self._commit([WatchEvent("PUT", kv)])
        return self._revision

    def _delete_locked(self, keys: list[bytes]) -> int:
        present = [k for k in keys if k in self._kvs]
        if not present:
            return 0
        self._revision += 1
        events = []
        for key in present:
            old = self._kvs.pop(key)
            if old.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            events.append(WatchEvent("DELETE", replace(old, value=b"", mod_revision=self._revision, version=0)))
        self._commit(events)
        return len(present)

    def _end_lease_locked(self, lease_id: int) -> None:
        state = self._leases.pop(lease_id)
        self._delete_locked(sorted(state.keys))
        self._cond.notify_all()

    def _reap_loop(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for lease_id in [i for i, s in self._leases.items() if s.deadline <= now]:
                    self._end_lease_locked(lease_id)
                next_deadline = min((s.deadline for s in self._leases.values()), default=None)
                timeout = None if next_deadline is None else max(0.0, next_deadline - time.monotonic())
                self._cond.wait(timeout)

    def _unregister(self, watch: _BuiltinWatch) -> None:
        with self._cond:
            if watch in self._watchers:
                self._watchers.remove(watch)

    # -- key-value -----------------------------------------------------------------------

    def get(self, key: bytes) -> KeyValue | None:
        key = check_key(key)
        with self._cond:
            self._check_open()
            return self._kvs.get(key)

    def range(self, prefix: bytes) -> RangeResult:
        prefix = _check_prefix(prefix)
        with self._cond:
            self._check_open()
            kvs = sorted((kv for k, kv in self._kvs.items() if k.startswith(prefix)), key=lambda kv: kv.key)
            return RangeResult(kvs, self._revision)

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        key, value = check_key(key), check_value(value)
        with self._cond:
            self._check_open()
            return self._put_locked(key, value, lease)

    def delete(self, key: bytes) -> bool:
        key = check_key(key)
        with self._cond:
            self._check_open()
            return self._delete_locked([key]) == 1

    def delete_prefix(self, prefix: bytes) -> int:
        prefix = _check_prefix(prefix)
        with self._cond:
            self._check_open()
            return self._delete_locked(sorted(k for k in self._kvs if k.startswith(prefix)))

    def compare_and_swap(self, key: bytes, expected_mod_revision: int, value: bytes, lease: int = 0) -> CasResult:
        key, value = check_key(key), check_value(value)
        with self._cond:
            self._check_open()
            current = self._kvs.get(key)
            if (current.mod_revision if current else 0) != expected_mod_revision:
                return CasResult(False, self._revision, current)
            revision = self._put_locked(key, value, lease)
            return CasResult(True, revision, self._kvs[key])

    def compare_and_delete(self, key: bytes, expected_mod_revision: int) -> CasResult:
        key = check_key(key)
        with self._cond:
            self._check_open()
            current = self._kvs.get(key)
            if current is None or current.mod_revision != expected_mod_revision:
                return CasResult(False, self._revision, current)
            self._delete_locked([key])
            return CasResult(True, self._revision, None)

    def revision(self) -> int:
        with self._cond:
            return self._revision

    # -- leases --------------------------------------------------------------------------

    def grant_lease(self, ttl: float) -> Lease:
        seconds = check_ttl(ttl)
        with self._cond:
            self._check_open()
            lease_id = secrets.randbits(62) + 1
            while lease_id in self._leases:
                lease_id = secrets.randbits(62) + 1
            self._leases[lease_id] = _LeaseState(seconds, time.monotonic() + seconds)
            self._cond.notify_all()
            return Lease(lease_id, seconds)

    def keepalive(self, lease_id: int) -> int:
        with self._cond:
            self._check_open()
            state = self._leases.get(lease_id)
            if state is None or state.deadline <= time.monotonic():
                raise LeaseNotFound(f"lease {lease_id} not found (expired or revoked)")
            state.deadline = time.monotonic() + state.ttl
            return state.ttl

    def revoke(self, lease_id: int) -> None:
        with self._cond:
            self._check_open()
            if lease_id not in self._leases:
                raise LeaseNotFound(f"lease {lease_id} not found (expired or revoked)")
            self._end_lease_locked(lease_id)

    def lease_time_to_live(self, lease_id: int) -> int:
        with self._cond:
            state = self._leases.get(lease_id)
            if state is None:
                return -1
            left = state.deadline - time.monotonic()
            return max(0, int(left + 0.999)) if left > 0 else -1

    # -- watches -------------------------------------------------------------------------

    def watch(self, prefix: bytes, start_revision: int = 0) -> Watch:
        prefix = _check_prefix(prefix)
        with self._cond:
            self._check_open()
            watch = _BuiltinWatch(prefix, self)
            if start_revision > 0 and start_revision <= self._revision:
                # Every revision after 1 has one history entry until the deque drops it.
                oldest = self._history[0][0] if self._history else self._revision + 1
                if oldest > 2 and start_revision < oldest:
                    raise CompactedError(f"revision {start_revision} is compacted; oldest retained is {oldest}")
                for revision, events in self._history:
                    if revision >= start_revision:
                        watch.push([e for e in events if e.kv.key.startswith(prefix)])
            self._watchers.append(watch)
            return watch

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            watchers, self._watchers = self._watchers, []
            self._cond.notify_all()
        for watch in watchers:
            watch.close()
        self._reaper.join(timeout=5)
