"""How a cluster worker reacts to ring changes: record migration, failures, graceful leave.

A component of ``MeshNode`` (``node.py``), given the parts it works on (the record
table and its lock, the member links, the local copies). On every ring epoch the records whose preference list changed
go to the members that gained them; when a member's lease ends, records it held become
L2 (durable) or lost; a leaving worker sends all its records and every object written
through it to live members, skipping members that are leaving at the same time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from kilorl.store.errors import ConnectionLost, KeyNotFound, StoreError, WorkerLeaving
from kilorl.store.local.objects import ObjectStore
from kilorl.store.mesh.copies import LocalCopies
from kilorl.store.mesh.links import MeshLinks
from kilorl.store.mesh.records import L2_HOLDER, MetaRecord, pack_records
from kilorl.store.mesh.state import MemberInfo, RingChange

log = logging.getLogger("kilorl.store.mesh.node")
_BATCH = 2000


class RingMoves:
    """Ring-change handling of a mesh worker: record migration, failures, leave handoff."""

    def __init__(self, records: dict[str, MetaRecord], lock: threading.RLock, links: MeshLinks,
                 copies: LocalCopies, store: ObjectStore, leaving: threading.Event, counters: dict[str, int],
                 rescue: Callable[[str, MetaRecord], bool]):
        self.records, self.lock, self.links, self.copies = records, lock, links, copies
        self.store, self.leaving, self.counters = store, leaving, counters
        self.id = links.id
        self.membership = links.membership
        self.rescue = rescue
        self.changes: queue.Queue = queue.Queue()
        self.last_rebalance_s = 0.0

    def run(self) -> None:
        """The rebalance thread: one ring change at a time, until ``None`` is queued."""
        while True:
            change = self.changes.get()
            if change is None:
                return
            if self.leaving.is_set():
                continue  # the leave handoff moves everything itself
            try:
                self.rebalance(change)
            except Exception:
                log.exception("rebalance for epoch %d failed", change.new.epoch)

    def rebalance(self, change: RingChange, leaving: bool = False) -> int:
        """Sends records whose preference list changed to the members that gained them."""
        t0 = time.monotonic()
        old, new = change.old.ring, change.new.ring
        if not len(new):
            return 0
        out: dict[str, list[MetaRecord]] = {}
        with self.lock:
            for key, rec in list(self.records.items()):
                new_pref = new.successors(key, 2)
                old_pref = old.successors(key, 2) if len(old) else []
                if leaving:
                    targets = [m for m in new_pref if m != self.id]
                elif new_pref == old_pref:
                    continue
                else:
                    survivors = [m for m in old_pref if m in new]
                    sender = not survivors or survivors[0] == self.id  # one survivor sends, the rest keep or drop
                    targets = [m for m in new_pref if m not in old_pref and m != self.id] if sender else []
                for m in targets:
                    out.setdefault(m, []).append(rec)
                if leaving or self.id not in new_pref:
                    del self.records[key]
        sent = 0
        for member, recs in out.items():
            for i in range(0, len(recs), _BATCH):
                batch = recs[i:i + _BATCH]
                try:
                    self.links.call_member(member, {"op": "c.meta_copy"}, pack_records(batch))
                    sent += len(batch)
                except StoreError as exc:
                    log.warning("sending %d records to %s failed: %s", len(batch), member, exc)
        self.counters["records_sent"] += sent
        self.last_rebalance_s = time.monotonic() - t0
        if sent:
            log.info("epoch %d: sent %d records in %.3fs", change.new.epoch, sent, self.last_rebalance_s)
        return sent

    def on_member(self, member: str, info: MemberInfo | None) -> None:
        if info is not None or member == self.id:
            return
        orphans = []
        with self.lock:
            for rec in self.records.values():
                rec.copies.pop(member, None)
                if rec.holder == member:
                    if rec.durable:
                        rec.holder = L2_HOLDER
                    else:
                        rec.lost = True
                        if rec.copies:
                            orphans.append(MetaRecord.from_wire(rec.to_wire()))
        log.info("member %s is gone: its records were moved to L2 or marked lost (%d with copies elsewhere)",
                 member, len(orphans))
        if orphans:  # a full copy elsewhere becomes the holder; off the view's thread
            threading.Thread(target=self._rescue_all, args=(orphans,), name="rescue", daemon=True).start()

    def _rescue_all(self, orphans: list[MetaRecord]) -> None:
        saved = sum(1 for rec in orphans if self.rescue(rec.key, rec))
        log.info("%d of %d objects of a dead holder were adopted by workers holding copies", saved, len(orphans))

    def handoff(self, change: RingChange) -> None:
        """Leave: records to their new owners, then every object written here to a live member.

        Uses the newest ring (other members may be leaving at the same time); a member that
        refuses (it is leaving too) or is unreachable is skipped for the next in the ring.
        """
        try:
            self.membership.view.wait_for(lambda st: st.epoch >= change.new.epoch, timeout=5)
        except TimeoutError:
            pass
        refused = {self.id}
        with self.lock:
            records = list(self.records.values())
            self.records.clear()
        self._send_records(records, refused, change)
        for key, ver in self.copies.primaries():
            for target in self._targets(key, refused, change, len(self.membership.view.ring) + 1):
                try:
                    if self._push(key, ver, target):
                        self.counters["handed_off"] += 1
                    break
                except (ConnectionLost, WorkerLeaving) as exc:
                    log.info("member %s refused %r (%s); trying the next", target, key, exc)
                    refused.add(target)
                except StoreError as exc:
                    log.warning("handing %r to %s failed: %s", key, target, exc)
                    break

    def _targets(self, key: str, refused: set[str], change: RingChange, n: int) -> list[str]:
        ring = self.membership.view.ring
        if self.id in ring or not len(ring):
            ring = change.new.ring
        return [m for m in ring.successors(key, len(ring)) if m not in refused][:n]

    def _send_records(self, records: list[MetaRecord], refused: set[str], change: RingChange) -> None:
        for _ in range(5):
            out: dict[str, list[MetaRecord]] = {}
            for rec in records:
                for m in self._targets(rec.key, refused, change, 2):
                    out.setdefault(m, []).append(rec)
            retry: dict[str, MetaRecord] = {}
            for member, recs in out.items():
                for i in range(0, len(recs), _BATCH):
                    batch = recs[i:i + _BATCH]
                    try:
                        self.links.call_member(member, {"op": "c.meta_copy"}, pack_records(batch))
                        self.counters["records_sent"] += len(batch)
                    except (ConnectionLost, WorkerLeaving):
                        refused.add(member)
                        retry.update((r.key, r) for r in batch)
            if not retry:
                return
            records = list(retry.values())
        log.warning("%d records could not be handed to any member", len(records))

    def _push(self, key: str, ver: int, target: str) -> bool:
        try:
            handle = self.store.acquire(key)
        except KeyNotFound:
            return False
        try:
            with self.store.lock:
                obj = self.store.objects.get(key)
                mode = (obj.l2_mode or "none") if obj is not None else "none"
            buf = self.store.view(handle.region) if handle.region is not None else handle.data
            if buf is None:
                buf = memoryview(self.store.device.to_host(handle.tensor)).cast("B")
            self.links.pool.call(self.links.address_of(target), {"op": "c.push", "key": key, "ver": ver, "meta": handle.meta,
                                                     "mode": mode}, [buf])
            return True
        finally:
            if handle.region is not None:
                self.store.release([handle.region])

