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

``MeshView`` is the read side: a snapshot of ring and members followed by a
watch from the snapshot's revision, so subscribers get every ring epoch in order,
each with the ranges that moved (``ring.diff``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kilorl.store.mesh.ring import HashRing
from kilorl.store.mesh.state import (
    MalformedRing,
    MemberIdInUse,
    MemberInfo,
    MembershipConfig,
    MembershipError,
    RingChange,
    RingState,
    RingUpdate,
    reconcile,
    update_ring,
)
from kilorl.store.mesh.view import MeshView
from kilorl.store.metastore.base import LeaseNotFound, Metastore, MetastoreClosed, MetastoreError
from kilorl.store.metastore.keepalive import LeaseKeeper

log = logging.getLogger(__name__)

__all__ = [
    "MeshView",
    "MalformedRing",
    "MemberIdInUse",
    "MemberInfo",
    "Membership",
    "MembershipConfig",
    "MembershipError",
    "RingChange",
    "RingState",
    "RingUpdate",
    "reconcile",
    "update_ring",
]


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
        self.view = MeshView(store, self.config)
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
