"""Cluster membership and ring epochs on top of a Metastore.

Key layout under ``MembershipConfig.prefix`` (default ``/kilorl/store/default/``):

- ``members/<id>``: JSON ``MemberInfo``, attached to that member's lease. It exists
  exactly while the member heartbeats; lease expiry deletes it (failure detection).
- ``ring``: JSON ``{"epoch", "vnodes", "members": {id: weight}}``. Every change is a
  compare-and-swap on this key's ``mod_revision``, so concurrent changes serialize,
  each one bumps the epoch by exactly one, and no update is lost.

Protocol:

- **join**: grant a lease, create ``members/<id>`` (CAS "absent", so two live
  members can never share an id), keep the lease alive, then add the member to
  the ring (CAS loop). Every ring update also drops ring members that have no
  live record, so the ring converges even if the detector below was down.
- **failure**: when a member's lease expires its record is deleted; every other
  member watches ``members/`` and runs the same reconcile CAS. One wins, the rest
  see nothing left to do.
- **leave**: remove self from the ring (CAS), run the caller's handoff with the
  moved ranges while the record still exists (readers can still reach us), then
  revoke the lease.
- **lease lost** while alive (long pause, partition): the member re-registers
  with a new lease and rejoins the ring.

``ClusterView`` is the read side: a snapshot of ring and members followed by a
watch from the snapshot's revision, so subscribers get every ring epoch in order,
each with the ranges that moved (``ring.diff``).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kilorl.store.metastore.base import (
    KeyValue,
    LeaseNotFound,
    Metastore,
    MetastoreClosed,
    MetastoreError,
    Watch,
)
from kilorl.store.metastore.keepalive import LeaseKeeper
from kilorl.store.ring import DEFAULT_VNODES, HashRing, RangeMove, diff, validate_member_id

log = logging.getLogger(__name__)


class MembershipError(Exception):
    """A membership operation could not complete."""


class MemberIdInUse(MembershipError):
    """Another live member already registered this id."""


class MalformedRing(MembershipError):
    """The committed ring record cannot be decoded (written by something else, or corrupted)."""


@dataclass
class MembershipConfig:
    """Where the cluster lives in the metastore and how fast failures are detected."""

    prefix: str = "/kilorl/store/default/"
    """Key prefix of this cluster; different clusters may share one metastore."""
    lease_ttl: float = 3.0
    """Seconds without a heartbeat before a member is declared dead (etcd's minimum is 2)."""
    replicas: int = 1
    """Preference-list length used when reporting moved ranges (1: primary only)."""
    vnodes: int = DEFAULT_VNODES
    """Ring points per unit of member weight."""
    cas_timeout: float = 30.0
    """Give up a ring update that keeps losing compare-and-swap races after this many seconds."""

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {self.prefix!r}")
        if not self.lease_ttl > 0:
            raise ValueError(f"lease_ttl must be > 0, got {self.lease_ttl!r}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas!r}")

    @property
    def ring_key(self) -> bytes:
        return f"{self.prefix}ring".encode()

    @property
    def members_prefix(self) -> bytes:
        return f"{self.prefix}members/".encode()

    def member_key(self, member_id: str) -> bytes:
        return self.members_prefix + member_id.encode()


@dataclass(frozen=True)
class MemberInfo:
    """What other members need to reach a member."""

    id: str
    address: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        validate_member_id(self.id)
        if not isinstance(self.address, str) or not self.address:
            raise ValueError(f"address of member {self.id!r} must be a non-empty string")
        if not self.weight > 0:
            raise ValueError(f"weight of member {self.id!r} must be > 0, got {self.weight!r}")

    def to_bytes(self) -> bytes:
        return json.dumps({"id": self.id, "address": self.address, "weight": self.weight}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "MemberInfo":
        raw = json.loads(data)
        return cls(raw["id"], raw["address"], float(raw.get("weight", 1.0)))


@dataclass(frozen=True)
class RingState:
    """A committed ring: ``epoch`` counts changes; ``revision`` is the ring key's mod_revision."""

    epoch: int
    ring: HashRing
    revision: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps({"epoch": self.epoch, **self.ring.to_dict()}, sort_keys=True).encode()

    @classmethod
    def from_kv(cls, kv: KeyValue | None, vnodes: int = DEFAULT_VNODES) -> "RingState":
        if kv is None:
            return cls(0, HashRing((), vnodes), 0)
        try:
            raw = json.loads(kv.value)
            return cls(int(raw["epoch"]), HashRing.from_dict(raw), kv.mod_revision)
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedRing(f"ring record at {kv.key!r} (revision {kv.mod_revision}) is malformed: {exc}") from exc


@dataclass(frozen=True)
class RingChange:
    """One epoch step, with the ranges whose holders changed (see ``ring.diff``)."""

    old: RingState
    new: RingState
    moves: list[RangeMove]

    @property
    def joined(self) -> list[str]:
        return [m for m in self.new.ring.members if m not in self.old.ring]

    @property
    def left(self) -> list[str]:
        return [m for m in self.old.ring.members if m not in self.new.ring]


def _live_members(kvs: list[KeyValue], config: MembershipConfig) -> dict[str, MemberInfo]:
    out = {}
    for kv in kvs:
        if kv.key.startswith(config.members_prefix):
            try:
                info = MemberInfo.from_bytes(kv.value)
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed member record %r", kv.key)
                continue
            out[info.id] = info
    return out


@dataclass(frozen=True)
class RingUpdate:
    """Result of ``update_ring``: the state it replaced and the state now committed."""

    old: RingState
    new: RingState

    @property
    def changed(self) -> bool:
        return self.new.epoch != self.old.epoch

    def change(self, replicas: int = 1) -> RingChange:
        return RingChange(self.old, self.new, diff(self.old.ring, self.new.ring, replicas))


def update_ring(
    store: Metastore,
    config: MembershipConfig,
    mutate: Callable[[HashRing, dict[str, MemberInfo]], HashRing],
) -> RingUpdate:
    """Apply ``mutate`` to the committed ring with a compare-and-swap loop.

    ``mutate`` gets the current ring and the live members (read in one snapshot)
    and returns the wanted ring; members without a live record are always dropped.
    The returned ``old`` is exactly the state the swap replaced.
    """
    deadline = time.monotonic() + config.cas_timeout
    attempt = 0
    while True:
        snapshot = store.range(config.prefix.encode())
        ring_kv = next((kv for kv in snapshot.kvs if kv.key == config.ring_key), None)
        current = RingState.from_kv(ring_kv, config.vnodes)
        live = _live_members(snapshot.kvs, config)
        wanted = mutate(current.ring, live)
        for member in wanted.members:
            if member not in live:
                wanted = wanted.without_member(member)
        if wanted == current.ring:
            return RingUpdate(current, current)
        proposal = RingState(current.epoch + 1, wanted)
        result = store.compare_and_swap(config.ring_key, current.revision, proposal.to_bytes())
        if result.succeeded:
            committed = RingState(proposal.epoch, wanted, result.current.mod_revision if result.current else 0)
            return RingUpdate(current, committed)
        attempt += 1
        if time.monotonic() > deadline:
            raise MembershipError(f"ring update kept losing races for {config.cas_timeout}s ({attempt} attempts)")
        time.sleep(random.uniform(0, min(0.05, 0.002 * attempt)))  # de-synchronize contenders


def reconcile(store: Metastore, config: MembershipConfig) -> RingUpdate:
    """Drop ring members whose lease expired; a no-op when the ring is consistent."""
    return update_ring(store, config, lambda ring, live: ring)


class ClusterView:
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

    def start(self) -> "ClusterView":
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
        members = _live_members(snapshot.kvs, self.config)
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


@dataclass
class _Registration:
    lease_id: int
    keeper: LeaseKeeper


class Membership:
    """This process's membership in the cluster: join, heartbeat, detect failures, leave.

    Every member also acts as a failure detector: when another member's record
    disappears, it reconciles the ring (compare-and-swap, so only one wins).
    """

    def __init__(self, store: Metastore, member: MemberInfo, config: MembershipConfig | None = None):
        self.store = store
        self.member = member
        self.config = config or MembershipConfig()
        self.view = ClusterView(store, self.config)
        self._lock = threading.Lock()
        self._registration: _Registration | None = None
        self._closed = threading.Event()
        self._joined = False
        self.rejoins = 0

    # -- lifecycle -----------------------------------------------------------------------

    def join(self, wait_for_stale: bool = True) -> RingState:
        """Register, start heartbeats, add self to the ring; returns the committed ring.

        A record with our id that is still held by a previous incarnation (a
        restarted worker) is waited out for up to one lease TTL when
        ``wait_for_stale``; a live holder raises MemberIdInUse.
        """
        if self._joined:
            raise MembershipError(f"member {self.member.id!r} already joined; create a new Membership to rejoin")
        self._joined = True
        self._register(wait_for_stale)
        try:
            self.view.on_member(self._on_member_event)
            self.view.start()
            return update_ring(self.store, self.config, self._add_self).new
        except BaseException:
            self._closed.set()
            self._deregister(revoke=True)
            self.view.close()
            raise

    def leave(self, handoff: Callable[[RingChange], None] | None = None) -> RingState:
        """Leave gracefully: leave the ring, run ``handoff`` on the moved ranges, then deregister.

        ``handoff`` runs while our record still exists, so peers can still fetch
        from us; when it returns our lease is revoked.
        """
        self._closed.set()
        update = update_ring(self.store, self.config, lambda ring, live: ring.without_member(self.member.id))
        try:
            if handoff is not None and update.changed:
                handoff(update.change(self.config.replicas))
        finally:
            self._deregister(revoke=True)
            self.view.close()
        return update.new

    def abandon(self) -> None:
        """Stop heartbeating without leaving, as a crashed process would (tests, fatal exits)."""
        self._closed.set()
        self._deregister(revoke=False)
        self.view.close()

    @property
    def lease_id(self) -> int | None:
        with self._lock:
            return self._registration.lease_id if self._registration else None

    # -- internals -----------------------------------------------------------------------

    def _add_self(self, ring: HashRing, live: dict[str, MemberInfo]) -> HashRing:
        return ring.with_member(self.member.id, self.member.weight)

    def _register(self, wait_for_stale: bool) -> None:
        key = self.config.member_key(self.member.id)
        deadline: float | None = None
        while True:
            existing = self.store.get(key)
            if existing is None:
                lease = self.store.grant_lease(self.config.lease_ttl)
                result = self.store.compare_and_swap(key, 0, self.member.to_bytes(), lease=lease.id)
                if result.succeeded:
                    break
                self.store.revoke(lease.id)  # lost a race for the id; look again
                existing = result.current
            if existing is None:
                continue
            if deadline is None:
                # A previous incarnation's record goes when its lease runs out; wait that long.
                left = self.store.lease_time_to_live(existing.lease) if existing.lease else -1
                deadline = time.monotonic() + max(left, 0) + 2.0
            if not wait_for_stale or time.monotonic() > deadline:
                raise MemberIdInUse(
                    f"member id {self.member.id!r} is held by a live member (record {existing.value!r})"
                )
            time.sleep(0.1)
        keeper = LeaseKeeper(
            self.store, lease.id, lease.ttl, on_lost=self._on_lease_lost, name=f"lease-{self.member.id}"
        ).start()
        with self._lock:
            self._registration = _Registration(lease.id, keeper)

    def _deregister(self, revoke: bool) -> None:
        with self._lock:
            registration, self._registration = self._registration, None
        if registration is None:
            return
        registration.keeper.stop()
        if revoke:
            try:
                self.store.revoke(registration.lease_id)
            except LeaseNotFound:
                pass

    def _on_member_event(self, member_id: str, info: MemberInfo | None) -> None:
        if info is None and not self._closed.is_set():
            try:
                update = reconcile(self.store, self.config)
                if update.changed:
                    log.info("member %s is gone; ring epoch %d", member_id, update.new.epoch)
            except MetastoreError as exc:
                log.warning("reconcile after %s left failed: %s", member_id, exc)

    def _on_lease_lost(self, exc: Exception) -> None:
        if self._closed.is_set():
            return
        log.warning("member %s lost its lease (%s); rejoining", self.member.id, exc)
        threading.Thread(target=self._rejoin, name=f"rejoin-{self.member.id}", daemon=True).start()

    def _rejoin(self) -> None:
        with self._lock:
            old, self._registration = self._registration, None
        if old is not None:
            old.keeper.stop()
        while not self._closed.is_set():
            try:
                self._register(wait_for_stale=True)
                if self._closed.is_set():  # left or abandoned meanwhile
                    self._deregister(revoke=True)
                    return
                update_ring(self.store, self.config, self._add_self)
                self.rejoins += 1
                return
            except MetastoreClosed:
                return
            except (MetastoreError, MembershipError) as exc:
                log.warning("rejoin of %s failed, retrying: %s", self.member.id, exc)
                self._closed.wait(min(1.0, self.config.lease_ttl / 3))
