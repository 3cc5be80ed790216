"""The object table of one worker: which objects exist, where their bytes live, who reads them.

All state is guarded by one lock; callers do socket and fsync I/O outside it, holding a
region reference so the bytes cannot be freed underneath. A ``Region`` of the arena is
reference counted: the table holds one reference, every lease / in-flight send / queued
write-back holds another, and the memory returns to the allocator only at zero. That is
what lets a writer replace a key while readers keep using the old bytes. The records
(``Region``, ``Obj``, ``ReadHandle``) are in entries.py; moving bytes between tiers is in
tier_moves.py.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kilorl.store.errors import InvalidRequest, KeyExists, KeyNotFound, StoreError, StoreFullError, StoreTimeout
from kilorl.store.local import tiering
from kilorl.store.local.config import ResolvedConfig
from kilorl.store.local.entries import Obj, ReadHandle, Region
from kilorl.store.local.l2 import L2Entry, L2Store
from kilorl.store.local.tier_moves import TierMoves
from kilorl.store.wire.shm import Arena

log = logging.getLogger("kilorl.store.local.objects")

READ_TIERS = ("device", "dram", "disk", "l2")
"""Where a read can be served from (``ReadHandle.tier``), each with a ``reads_<tier>`` counter."""


class ObjectStore:
    """Object table of one worker over its tiers (``TierMoves``)."""

    def __init__(self, rc: ResolvedConfig, arena: Arena):
        spec = rc.spec
        self.rc = rc
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.arena = arena
        self.objects: dict[str, Obj] = {}
        self._gens = itertools.count(1)
        self.counters = {"promotions": 0, "demotions": 0, "evictions_to_l2": 0, "expired": 0,
                         **{f"reads_{tier}": 0 for tier in READ_TIERS}}
        self.tiers = TierMoves(rc, arena, self.objects, self.counters)
        self.alloc, self.disk, self.device = self.tiers.alloc, self.tiers.disk, self.tiers.device
        self.available = self.tiers.available
        self.view, self.capacity, self.used = self.tiers.view, self.tiers.capacity, self.tiers.used
        self.l2: L2Store | None = None
        if spec.l2_dir:
            self.l2 = L2Store(spec.l2_dir, spec.write_back_queue, self.is_current, self.may_delete_l2)
            self._load_l2(self.l2.scan())
        self.tiers.l2_kept = self.l2 is not None

    @property
    def on_release(self) -> Callable[[Obj], None] | None:
        """Called under the lock before an object lets go of its arena region (the version board)."""
        return self.tiers.on_release

    @on_release.setter
    def on_release(self, hook: Callable[[Obj], None] | None) -> None:
        self.tiers.on_release = hook

    def enforce_watermarks(self, tier: str, protect: Obj | None = None) -> None:
        self.tiers.enforce_watermarks(tier, protect)

    # -- writing -----------------------------------------------------------------------
    def stage(self, size: int, tier: str | None = None) -> Region | bytearray:
        """Room for incoming bytes: an arena region, or a buffer when they go below DRAM anyway."""
        with self.lock:
            try:
                return self.tiers.alloc_dram(size)
            except StoreFullError:
                if tier in ("disk", "device") and tier in self.available:
                    return bytearray(size)
                raise

    def check_tier(self, tier: str | None) -> None:
        if tier is not None and tier not in self.available:
            raise InvalidRequest(f"tier: {tier!r} is not configured on this worker "
                                 f"(available: {sorted(self.available)})")

    def put(self, key: str, meta: dict[str, Any], size: int, data: Region | bytearray, *, tier: str | None,
            ttl: float | None, l2_mode: str | None, pin: bool, if_absent: bool = False) -> tuple[Obj, Obj | None]:
        """Stores an object (taking ownership of ``data``); returns (new, replaced).

        ``if_absent``: raise ``KeyExists`` instead if a live object holds ``key`` (decided
        under the table lock, so of concurrent set-if-absent writers exactly one stores)."""
        with self.lock:
            try:
                if if_absent and self.live(key) is not None:
                    raise KeyExists(f"key {key!r} already exists")
                self.check_tier(tier)
                pref = tiering.preferred_tier(key, tier, self.rc.spec.tier_rules, self.available)
                obj = Obj(key, next(self._gens), meta, size, pref, pinned=pin, l2_mode=l2_mode,
                          expires_at=time.time() + ttl if ttl else None)
                tiering.touch(obj)
                self.tiers.place(obj, data)
            except BaseException:
                if isinstance(data, Region):
                    self.tiers.unref(data)
                raise
            old = self.objects.pop(key, None)
            if old is not None:
                self.tiers.release_storage(old)
            self.objects[key] = obj
            self.enforce_watermarks(obj.tier, protect=obj)
            self.changed.notify_all()
            return obj, old

    # -- reading -----------------------------------------------------------------------
    def live(self, key: str) -> Obj | None:
        obj = self.objects.get(key)
        if obj is not None and obj.expires_at is not None and obj.expires_at <= time.time():
            self.remove(obj)
            self.counters["expired"] += 1
            if obj.l2_mode and self.l2:
                self.l2.enqueue_delete(key)
            return None
        return obj

    def remove(self, obj: Obj) -> None:
        del self.objects[obj.key]
        self.tiers.release_storage(obj)

    def acquire(self, key: str, timeout: float | None = None) -> ReadHandle:
        """A reference to an object's bytes; promotes it first when tiering says so.

        Files (disk tier, L2) are read outside the lock, into a DRAM region reserved for
        the promotion when there is room, so a large promotion does not stall other requests.
        Counts the read under the tier whose bytes served it (``reads_<tier>``, the hit rates;
        a file read promoted into DRAM on the way counts as ``disk`` / ``l2``).
        """
        return self._acquire(key, timeout)

    def _acquire(self, key: str, timeout: float | None = None, _retry: bool = True) -> ReadHandle:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            obj = self.live(key)
            while obj is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is None or remaining <= 0:
                    if timeout:
                        raise StoreTimeout(f"key {key!r} did not appear within {timeout}s")
                    raise KeyNotFound(f"key {key!r} not found")
                self.changed.wait(remaining)
                obj = self.live(key)
            heat = tiering.touch(obj)
            target = tiering.promotion_target(obj.tier, obj.preferred, heat, self.available)
            cold = obj.tier in ("disk", None)
            if target is not None and not obj.pinned and not (cold and target == "dram"):
                self.tiers.promote(obj, target)
                cold = obj.tier in ("disk", None)
            if obj.tier == "dram":
                obj.region.refs += 1
                self.counters["reads_dram"] += 1
                return ReadHandle(obj.meta, obj.size, "dram", region=obj.region)
            if obj.tier == "device":
                self.counters["reads_device"] += 1
                # The reply decides between a CUDA IPC handle and a host copy (server/reads.read_reply).
                return ReadHandle(obj.meta, obj.size, "device", tensor=obj.tensor)
            src = (obj.tier, obj.disk_path, obj.l2_path, obj.l2_offset)
            region = None
            if target == "dram" and not obj.pinned and not obj.promoting:
                try:
                    region = self.tiers.alloc_dram(obj.size, protect=obj, max_heat=heat)
                    obj.promoting = True
                except StoreFullError:
                    region = None
        into = self.view(region) if region is not None else memoryview(bytearray(obj.size))
        try:
            self.tiers.read_file(src, into)
            ok = True
        except OSError:
            ok = False
        with self.lock:
            if region is not None:
                obj.promoting = False
            unchanged = self.objects.get(key) is obj and (obj.tier, obj.disk_path, obj.l2_path) == src[:3]
            if not ok:
                if region is not None:
                    self.tiers.unref(region)
                if unchanged or not _retry:
                    raise StoreError(f"reading {key!r} from its {src[0] or 'l2'} file failed")
            else:  # served from a file (even when promoted on the way): a miss of the memory tiers
                self.counters[f"reads_{src[0] or 'l2'}"] += 1
                if region is None:
                    return ReadHandle(obj.meta, obj.size, src[0] or "l2", data=into)
                if unchanged:
                    self.tiers.release_storage(obj)
                    obj.region, obj.tier = region, "dram"
                    region.refs += 1
                    self.counters["promotions"] += 1
                # Otherwise the key changed meanwhile: serve the bytes read (a consistent
                # snapshot of the version looked up); the region goes with the reader's lease.
                return ReadHandle(obj.meta, obj.size, "dram", region=region)
        return self._acquire(key, timeout, _retry=False)  # the object moved under us: look it up again

    def retain(self, region: Region) -> None:
        """One more reference to ``region`` (released with ``release``)."""
        with self.lock:
            region.refs += 1

    def peek(self, key: str) -> tuple[dict[str, Any], int] | None:
        """(meta, size) of a live object without reading or promoting it."""
        with self.lock:
            obj = self.live(key)
            return (obj.meta, obj.size) if obj is not None else None

    def release(self, regions: list[Region]) -> None:
        with self.lock:
            for r in regions:
                self.tiers.unref(r)

    # -- key space ---------------------------------------------------------------------
    def delete(self, keys: list[str]) -> tuple[int, list[tuple[str, str]]]:
        """Deletes keys; returns (count, [(key, l2_mode)] whose L2 copies must go too)."""
        n, l2 = 0, []
        with self.lock:
            for key in keys:
                obj = self.live(key)
                if obj is None:
                    continue
                self.remove(obj)
                n += 1
                if obj.l2_mode:
                    l2.append((key, obj.l2_mode))
        return n, l2

    def delete_generation(self, key: str, gen: int) -> bool:
        """Deletes ``key`` only if it is still generation ``gen`` (a newer write stays)."""
        with self.lock:
            obj = self.objects.get(key)
            if obj is None or obj.gen != gen:
                return False
            self.remove(obj)
            return True

    def generation(self, key: str) -> int | None:
        with self.lock:
            obj = self.objects.get(key)
            return obj.gen if obj is not None else None

    def exists(self, keys: list[str]) -> list[bool]:
        with self.lock:
            return [self.live(k) is not None for k in keys]

    # -- L2 hooks ----------------------------------------------------------------------
    def l2_source(self, obj: Obj) -> tuple[memoryview, Region | None]:
        """The bytes of ``obj`` for an L2 write; a returned region must be released."""
        with self.lock:
            if obj.region is not None:
                obj.region.refs += 1
                return self.view(obj.region), obj.region
            if obj.tensor is not None:
                return self.device.to_host(obj.tensor), None
            buf = memoryview(bytearray(obj.size))
            self.tiers.read_cold(obj, buf)
            return buf, None

    def is_current(self, key: str, gen: int) -> bool:
        with self.lock:
            obj = self.objects.get(key)
            return obj is not None and obj.gen == gen

    def may_delete_l2(self, key: str) -> bool:
        with self.lock:
            obj = self.objects.get(key)
            return obj is None or obj.l2_mode is None

    def mark_durable(self, key: str, gen: int, location: tuple[str, int]) -> None:
        with self.lock:
            obj = self.objects.get(key)
            if obj is not None and obj.gen == gen:
                obj.l2_durable = True
                obj.l2_path, obj.l2_offset = location

    def _load_l2(self, entries: list[L2Entry]) -> None:
        for e in entries:
            pref = tiering.preferred_tier(e.key, None, self.rc.spec.tier_rules, self.available)
            self.objects[e.key] = Obj(e.key, next(self._gens), e.meta, e.size, pref, expires_at=e.expires_at,
                                      l2_mode="through", l2_durable=True, l2_path=e.path, l2_offset=e.data_offset)
        if entries:
            log.info("recovered %d objects from L2", len(entries))
