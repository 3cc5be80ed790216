"""Reads of keys held by other workers: whole pulls, byte ranges, records, adoption.

``RemoteReads`` is a part of ``MeshNode`` given the pieces it works on (member links,
local copies, the object store, the peer pool). A whole read pulls the object once per
worker (concurrent local readers wait for that pull) and keeps it as a replica; a byte
range pulls only those bytes and keeps nothing; a lost record is first offered to the
workers holding copies (``rescue``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from kilorl.store.errors import ConnectionLost, InvalidRequest, KeyNotFound, ObjectLost, StaleCopy, StoreError
from kilorl.store.local.entries import ReadHandle, Region
from kilorl.store.local.objects import ObjectStore
from kilorl.store.mesh import transfer
from kilorl.store.mesh.copies import LocalCopies
from kilorl.store.mesh.links import MeshLinks
from kilorl.store.mesh.records import L2_HOLDER, MetaRecord
from kilorl.store.wire.peers import PeerPool

log = logging.getLogger("kilorl.store.mesh.reads")


@dataclass
class Located:
    rec: MetaRecord
    source: str

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rec, name)


class RemoteReads:
    """Remote reads of one mesh worker (see the module docstring)."""

    def __init__(self, links: MeshLinks, copies: LocalCopies, store: ObjectStore, pool: PeerPool,
                 chunk_size: int, get_timeout: float, counters: dict[str, int], lock: threading.RLock):
        self.links, self.copies, self.store, self.pool = links, copies, store, pool
        self.chunk_size, self.get_timeout = chunk_size, get_timeout
        self.counters, self.lock = counters, lock
        self._fetch_locks: dict[str, list] = {}

    def describe(self, key: str) -> tuple[dict[str, Any], int] | None:
        located = self.lookup(key, set(), register=False)
        if located is None:
            return None
        if located.rec.lost and not self.rescue(key, located.rec):
            raise ObjectLost(f"key {key!r} was held only by worker {located.rec.holder}, which died")
        return located.rec.meta, located.rec.size

    def read_range(self, key: str, offset: int, length: int) -> ReadHandle | None:
        """Pulls ``length`` bytes at ``offset`` of ``key`` from a worker holding it (the holder
        first, then other copies), or from the shared L2 directory, into this worker's arena."""
        located = self.lookup(key, set(), register=False)
        if located is None:
            return None
        rec = located.rec
        if rec.lost:
            if not self.rescue(key, rec):
                raise ObjectLost(f"key {key!r} was held only by worker {rec.holder}, which died")
            return self.read_range(key, offset, length)
        if offset + length > rec.size:
            raise InvalidRequest(f"offset/length: [{offset}, {offset + length}) is outside {key!r} ({rec.size} bytes)")
        data = self.store.stage(length)
        view = self.store.view(data) if isinstance(data, Region) else memoryview(data)
        try:
            self._fill_range(rec, offset, view)
        except BaseException:
            if isinstance(data, Region):
                self.store.release([data])
            raise
        if isinstance(data, Region):
            return ReadHandle({"k": "bytes"}, length, "dram", region=data)
        return ReadHandle({"k": "bytes"}, length, "dram", data=view)

    def _fill_range(self, rec: MetaRecord, offset: int, view: memoryview) -> None:
        live = self.links.membership.view.members
        sources = [m for m in dict.fromkeys([rec.holder, *rec.copies]) if m and m != self.links.id and m in live]
        last: Exception | None = None
        for source in sources:
            try:
                transfer.fetch_range(self.pool, self.links.address_of(source), rec.key, rec.ver, offset, view,
                                     self.chunk_size)
                self.counters["remote_ranges"] += 1
                return
            except (ConnectionLost, StaleCopy, KeyNotFound) as exc:
                last = exc
        if rec.durable and transfer.read_l2_range(self.store, rec.key, offset, view):
            return
        raise ObjectLost(f"key {rec.key!r}: no worker holding it could serve [{offset}, {offset + len(view)})"
                         f" ({last})")

    def rescue(self, key: str, rec: MetaRecord) -> bool:
        """The holder of non-durable ``key`` died: asks the workers with copies (then every
        live worker) to adopt it; True once one with a full copy at ``rec.ver`` did."""
        live = self.links.membership.view.members
        candidates = [m for m in dict.fromkeys([*rec.copies, *sorted(live)]) if m in live and m != rec.holder]
        for member in candidates:
            try:
                if self.links.call_member(member, {"op": "c.adopt", "key": key, "ver": rec.ver}).get("adopted"):
                    self.counters["adopted"] += 1
                    return True
            except StoreError:
                continue
        return False

    def exists_elsewhere(self, key: str) -> bool:
        located = self.lookup(key, set(), register=False)
        return located is not None and not located.rec.lost

    def ensure_local(self, key: str, timeout: float | None) -> bool:
        """Makes ``key`` readable from this worker's store, pulling it if needed.

        Concurrent readers of one key on this worker wait for a single pull."""
        if self.store.exists([key])[0]:
            return True
        with self.lock:
            entry = self._fetch_locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                self._ensure_local(key, timeout)
            return True
        finally:
            with self.lock:
                entry[1] -= 1
                if entry[1] == 0:
                    self._fetch_locks.pop(key, None)

    def _ensure_local(self, key: str, timeout: float | None) -> None:
        wait = timeout if timeout else 0.0
        deadline = time.monotonic() + max(wait, self.get_timeout)
        appear_by = time.monotonic() + wait
        exclude: set[str] = set()
        while True:
            if self.store.exists([key])[0]:
                return
            with self.lock:
                infl = self.copies.inflight.get(key)
            if infl is not None:
                with infl.cond:
                    infl.cond.wait_for(lambda infl=infl: infl.finished, timeout=max(0.0, deadline - time.monotonic()))
                continue
            rec = self.lookup(key, exclude)
            if rec is None:
                if transfer.l2_exists(self.store, key) and transfer.load_from_l2(self.copies, key, 0):
                    self.counters["l2_loads"] += 1
                    return
                if time.monotonic() >= appear_by:
                    raise KeyNotFound(f"key {key!r} not found" if not timeout
                                      else f"key {key!r} did not appear within {timeout}s")
                time.sleep(0.05)
                continue
            if rec.lost:
                if self.rescue(key, rec.rec):
                    continue  # a copy became the holder: look it up again
                raise ObjectLost(f"key {key!r} was held only by worker {rec.holder}, which died "
                                 f"(not written to L2), and no other worker has a full copy")
            source = rec.source
            try:
                if source == L2_HOLDER or source == self.links.id:
                    if transfer.load_from_l2(self.copies, key, rec.ver):
                        self.counters["l2_loads"] += 1
                        return
                    raise ObjectLost(f"key {key!r}: its holder is gone and the shared L2 directory has no "
                                     f"copy (write mode {rec.mode!r}, write-back not flushed?)")
                transfer.pull(self.copies, self.pool, self.chunk_size, key, rec.ver, rec.size, rec.meta,
                              self.links.address_of(source))
                self.counters["remote_gets"] += 1
                return
            except (ConnectionLost, StaleCopy, KeyNotFound) as exc:
                log.info("pull of %r from %s failed: %s", key, source, exc)
                if rec.durable and transfer.l2_exists(self.store, key) and source == rec.holder:
                    if transfer.load_from_l2(self.copies, key, rec.ver):
                        self.counters["l2_loads"] += 1
                        return
                if source != rec.holder:
                    exclude.add(source)  # a relay failed: go to the holder next time
                elif rec.holder not in self.links.membership.view.members and not rec.durable:
                    # The holder died before its owner marked the record lost: a copy may adopt it.
                    if self.rescue(key, rec.rec):
                        continue
                    raise ObjectLost(f"key {key!r} was held only by worker {rec.holder}, which died") from None
            if time.monotonic() >= deadline:
                raise ObjectLost(f"key {key!r}: holder {rec.holder} unreachable for {self.get_timeout}s")
            time.sleep(0.05)

    def lookup(self, key: str, exclude: set[str], register: bool = True) -> Located | None:
        """The key's record from its owner (or replica), else from any worker holding it."""
        header = {"op": "c.locate", "key": key, "requester": self.links.id if register else "", "exclude": sorted(exclude)}
        for member in self.links.preference(key):
            try:
                resp = self.links.call_member(member, header)
            except ConnectionLost:
                continue
            if resp.get("rec") is not None:
                return Located(MetaRecord.from_wire(resp["rec"]), resp["source"])
        # Not on the owners (a migration in flight, or both died): ask every live worker.
        for member, info in sorted(self.links.membership.view.members.items()):
            if member == self.links.id or member in exclude:
                continue
            try:
                resp = self.pool.call(info.address, {"op": "c.has", "key": key})
            except (ConnectionLost, StoreError):
                continue
            if resp.get("rec") is not None:
                return Located(MetaRecord.from_wire(resp["rec"]), member)
        return None
