"""Live read-side view of the cluster: ring epochs (with moved ranges) and member records."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kilorl.store.mesh.ring import HashRing, diff
from kilorl.store.mesh.state import (
    MalformedRing,
    MemberInfo,
    MembershipConfig,
    RingChange,
    RingState,
    live_members,
)
from kilorl.store.metastore.base import Metastore, MetastoreClosed, MetastoreError, Watch

log = logging.getLogger(__name__)


class MeshView:
    """Live view of the ring and members; subscribers get every ``RingChange`` in epoch order.

    Callbacks run on the view's thread: keep them short or hand work to your own.
    """

    def __init__(self, store: Metastore, config: MembershipConfig | None = None):
        self.store = store
        self.config = config or MembershipConfig()
        self._cond = threading.Condition()
        self._state = RingState(0, HashRing((), self.config.vnodes), 0)
        self._delivered = self._state  # the latest state every subscriber has been given
        self._members: dict[str, MemberInfo] = {}
        self._subscribers: list[Callable[[RingChange], None]] = []
        self._member_listeners: list[Callable[[str, MemberInfo | None], None]] = []
        self._watch: Watch | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.error: Exception | None = None
        self.resyncs = 0  # times the watch was re-established after an outage

    def start(self) -> MeshView:
        self._resync(initial=True)
        self._thread = threading.Thread(target=self._run, name="cluster-view", daemon=True)
        self._thread.start()
        return self

    def _resync(self, initial: bool = False) -> None:
        """Snapshot ring and members, then watch from right after the snapshot (no gap).

        After an outage (etcd restarted, watch compacted) the view catches up
        here; subscribers then get one change that may span several epochs, which
        is still exact for handoff because moves are the diff of the two rings.
        """
        prefix = self.config.prefix.encode()
        snapshot = self.store.range(prefix)
        ring_kv = next((kv for kv in snapshot.kvs if kv.key == self.config.ring_key), None)
        state = RingState.from_kv(ring_kv, self.config.vnodes)
        members = live_members(snapshot.kvs, self.config)
        self._watch = self.store.watch(prefix, start_revision=snapshot.revision + 1)
        if initial:
            with self._cond:
                self._state = self._delivered = state
                self._members = members
            return
        with self._cond:
            old_members = self._members
        for member_id in sorted(set(old_members) - set(members)):
            self._set_member(member_id, None)
        for member_id, info in sorted(members.items()):
            if old_members.get(member_id) != info:
                self._set_member(member_id, info)
        self._set_ring(state)

    @property
    def state(self) -> RingState:
        with self._cond:
            return self._state

    @property
    def ring(self) -> HashRing:
        return self.state.ring

    @property
    def members(self) -> dict[str, MemberInfo]:
        with self._cond:
            return dict(self._members)

    def subscribe(self, callback: Callable[[RingChange], None]) -> None:
        """Call ``callback(change)`` for every ring epoch committed after now."""
        with self._cond:
            self._subscribers.append(callback)

    def on_member(self, callback: Callable[[str, MemberInfo | None], None]) -> None:
        """Call ``callback(id, info)`` when a member record appears, or ``(id, None)`` when it goes."""
        with self._cond:
            self._member_listeners.append(callback)

    def wait_for(self, predicate: Callable[[RingState], bool], timeout: float) -> RingState:
        """Block until ``predicate(state)`` holds for a state all subscribers have been given.

        Raises TimeoutError (with the last state) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self._delivered):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set():
                    raise TimeoutError(f"ring condition not met within {timeout}s; last state {self._delivered}")
                self._cond.wait(left)
            return self._delivered

    def _run(self) -> None:
        backoff = 0.1
        try:
            while not self._stopped.is_set():
                try:
                    if self._watch is None:
                        self._resync()
                        self.resyncs += 1
                        backoff = 0.1
                    batch = self._watch.get(timeout=0.5)
                    for event in batch or ():
                        self._apply(event)
                except MetastoreClosed:
                    return
                except MetastoreError as exc:  # stream ended, compacted, etcd unreachable
                    if self._stopped.is_set():
                        return
                    log.warning("cluster view lost its watch (%s); resyncing in %.1fs", exc, backoff)
                    if self._watch is not None:
                        self._watch.close()
                        self._watch = None
                    self._stopped.wait(backoff)
                    backoff = min(2.0, backoff * 2)
        except Exception as exc:  # noqa: BLE001 - surfaced through .error and wait_for
            if not self._stopped.is_set():
                log.exception("cluster view stopped")
                self.error = exc
        finally:
            self._stopped.set()
            with self._cond:
                self._cond.notify_all()

    def _apply(self, event) -> None:
        key = event.kv.key
        if key == self.config.ring_key:
            if event.type == "DELETE":
                self._set_ring(RingState(self._state.epoch, HashRing((), self.config.vnodes), 0))
                return
            try:
                self._set_ring(RingState.from_kv(event.kv, self.config.vnodes))
            except MalformedRing as exc:  # keep serving the last good ring; ring writers will refuse it too
                log.error("%s; keeping epoch %d", exc, self._state.epoch)
        elif key.startswith(self.config.members_prefix):
            member_id = key[len(self.config.members_prefix) :].decode(errors="replace")
            info = None
            if event.type == "PUT":
                try:
                    info = MemberInfo.from_bytes(event.kv.value)
                except (ValueError, KeyError, TypeError):
                    return
            self._set_member(member_id, info)

    def _set_ring(self, new: RingState) -> None:
        with self._cond:
            old, self._state = self._state, new
            subscribers = list(self._subscribers)
        if new.ring != old.ring:
            change = RingChange(old, new, diff(old.ring, new.ring, self.config.replicas))
            for callback in subscribers:
                try:
                    callback(change)
                except Exception:  # one bad subscriber must not starve the others
                    log.exception("ring subscriber failed on epoch %d", new.epoch)
        with self._cond:
            self._delivered = new
            self._cond.notify_all()

    def _set_member(self, member_id: str, info: MemberInfo | None) -> None:
        with self._cond:
            if info is None:
                self._members.pop(member_id, None)
            else:
                self._members[member_id] = info
            listeners = list(self._member_listeners)
            self._cond.notify_all()
        for callback in listeners:
            try:
                callback(member_id, info)
            except Exception:  # noqa: BLE001
                log.exception("member listener failed on %s", member_id)

    def close(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.close()
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
