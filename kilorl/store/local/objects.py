"""The object table of one worker: where each object's bytes live, and moving them.

All state is guarded by one lock; callers do socket and fsync I/O outside it, holding a
region reference so the bytes cannot be freed underneath. A ``Region`` of the arena is
reference counted: the table holds one reference, every lease / in-flight send / queued
write-back holds another, and the memory returns to the allocator only at zero. That is
what lets a writer replace a key while readers keep using the old bytes. The records
(``Region``, ``Obj``, ``ReadHandle``) are in entries.py.
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
from kilorl.store.local.arena import Allocator
from kilorl.store.local.config import ResolvedConfig
from kilorl.store.local.entries import Obj, ReadHandle, Region
from kilorl.store.local.l2 import L2Entry, L2Store
from kilorl.store.wire.shm import Arena

log = logging.getLogger("kilorl.store.local.objects")



READ_TIERS = ("device", "dram", "disk", "l2")
"""Where a read can be served from (``ReadHandle.tier``), each with a ``reads_<tier>`` counter."""

class ObjectStore:
    """Object table and tiers of one worker, and the moves between tiers."""

    def __init__(self, rc: ResolvedConfig, arena: Arena):
        spec = rc.spec
        self.rc = rc
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.arena = arena
        self.alloc = Allocator(arena.size)
        self.disk = None
        self.device = None
        if spec.disk_dir:
            from kilorl.store.local.tiers.disk import DiskTier

            self.disk = DiskTier(spec.disk_dir, rc.disk_bytes)
        if spec.device:
            from kilorl.store.local.tiers.device import DeviceTier

            self.device = DeviceTier(spec.device, rc.device_bytes)
        self.available = {"dram"} | ({"disk"} if self.disk else set()) | ({"device"} if self.device else set())
        self.objects: dict[str, Obj] = {}
        self._gens = itertools.count(1)
        self.counters = {"promotions": 0, "demotions": 0, "evictions_to_l2": 0, "expired": 0,
                         **{f"reads_{tier}": 0 for tier in READ_TIERS}}
        self.l2: L2Store | None = None
        self.on_release: Callable[[Obj], None] | None = None
        """Called under the lock before an object lets go of its arena region (the version board)."""
        if spec.l2_dir:
            self.l2 = L2Store(spec.l2_dir, spec.write_back_queue, self.is_current, self.may_delete_l2)
            self._load_l2(self.l2.scan())

    # -- capacity helpers --------------------------------------------------------------
    def capacity(self, tier: str) -> int:
        return {"dram": self.arena.size, "disk": self.disk.capacity if self.disk else 0,
                "device": self.device.capacity if self.device else 0}[tier]

    def used(self, tier: str) -> int:
        return {"dram": self.alloc.used_bytes, "disk": self.disk.used if self.disk else 0,
                "device": self.device.used if self.device else 0}[tier]

    def _unref(self, region: Region) -> None:
        region.refs -= 1
        if region.refs == 0:
            self.alloc.free(region.offset)

    def view(self, region: Region) -> memoryview:
        return self.arena.view[region.offset:region.offset + region.size]

    def _full_error(self, tier: str, size: int) -> StoreFullError:
        in_tier = [o for o in self.objects.values() if o.tier == tier]
        pinned = sum(o.size for o in in_tier if o.pinned)
        live = sum(o.size for o in in_tier)
        return StoreFullError(
            f"{tier} tier full: need {size} bytes, {self.capacity(tier) - self.used(tier)} of "
            f"{self.capacity(tier)} free (largest block {self.alloc.largest_free() if tier == 'dram' else 'n/a'}); "
            f"{pinned} bytes pinned, {self.used(tier) - live if tier == 'dram' else 0} bytes held by readers "
            f"of replaced objects or in-flight writes; nothing colder could be demoted")

    # -- making room -------------------------------------------------------------------
    def _alloc_dram(self, size: int, protect: Obj | None = None, max_heat: float | None = None) -> Region:
        off = self.alloc.alloc(size)
        if off is None:
            for victim in self._victims("dram", protect, max_heat):
                if self._demote(victim):
                    off = self.alloc.alloc(size)
                    if off is not None:
                        break
        if off is None:
            raise self._full_error("dram", size)
        return Region(off, size)

    def _room(self, tier: str, size: int, protect: Obj | None = None, max_heat: float | None = None) -> None:
        if size > self.capacity(tier):
            raise self._full_error(tier, size)
        if self.capacity(tier) - self.used(tier) >= size:
            return
        for victim in self._victims(tier, protect, max_heat):
            if self._demote(victim) and self.capacity(tier) - self.used(tier) >= size:
                return
        raise self._full_error(tier, size)

    def _victims(self, tier: str, protect: Obj | None, max_heat: float | None) -> list[Obj]:
        now = time.monotonic()
        out = tiering.coldest_first((o for o in self.objects.values() if o.tier == tier and o is not protect), now)
        if max_heat is not None:
            out = [o for o in out if tiering.decayed(o, now) < max_heat]
        return out

    def _demote(self, obj: Obj) -> bool:
        """Moves ``obj`` one tier down (or drops its memory copy if L2 holds it)."""
        try:
            if obj.tier == "device":
                data = self.device.to_host(obj.tensor)
                try:
                    region = self._alloc_dram(obj.size, protect=obj)
                except StoreFullError:
                    return self._to_disk_or_l2(obj, data)
                self.view(region)[:] = data
                self._release_storage(obj)
                obj.region, obj.tier = region, "dram"
            elif obj.tier == "dram":
                return self._to_disk_or_l2(obj, self.view(obj.region))
            elif obj.tier == "disk":
                if not obj.l2_durable:
                    return False
                self._release_storage(obj)
                self.counters["evictions_to_l2"] += 1
            else:
                return False
        except OSError:
            log.exception("demotion of %r failed", obj.key)
            return False
        self.counters["demotions"] += 1
        return True

    def _to_disk_or_l2(self, obj: Obj, data: memoryview) -> bool:
        if self.disk is not None and obj.tier != "disk":
            try:
                self._room("disk", obj.size, protect=obj)
                path = self.disk.write(data)
            except StoreFullError:
                path = None
            if path is not None:
                self._release_storage(obj)
                obj.disk_path, obj.tier = path, "disk"
                self.counters["demotions"] += 1
                return True
        if obj.l2_durable:
            self._release_storage(obj)
            self.counters["evictions_to_l2"] += 1
            return True
        return False

    def _release_storage(self, obj: Obj) -> None:
        if obj.region is not None:
            if self.on_release is not None:
                self.on_release(obj)  # e.g. the version board forgets the region before it is freed
            self._unref(obj.region)
            obj.region = None
        if obj.tensor is not None:
            self.device.remove(obj.tensor)
            obj.tensor = None
        if obj.disk_path is not None:
            self.disk.remove(obj.disk_path, obj.size)
            obj.disk_path = None
        obj.tier = None

    def enforce_watermarks(self, tier: str, protect: Obj | None = None) -> None:
        cap = self.capacity(tier)
        spec = self.rc.spec
        if not cap or self.used(tier) <= spec.high_watermark * cap:
            return
        if self.l2 is None and (tier == "disk" or (tier == "dram" and self.disk is None)):
            return  # nowhere to demote to: don't scan every object on every write
        for victim in self._victims(tier, protect, None):
            if self.used(tier) <= spec.low_watermark * cap:
                break
            self._demote(victim)

    # -- writing -----------------------------------------------------------------------
    def stage(self, size: int, tier: str | None = None) -> Region | bytearray:
        """Room for incoming bytes: an arena region, or a buffer when they go below DRAM anyway."""
        with self.lock:
            try:
                return self._alloc_dram(size)
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
                self._place(obj, data)
            except BaseException:
                if isinstance(data, Region):
                    self._unref(data)
                raise
            old = self.objects.pop(key, None)
            if old is not None:
                self._release_storage(old)
            self.objects[key] = obj
            self.enforce_watermarks(obj.tier, protect=obj)
            self.changed.notify_all()
            return obj, old

    def _place(self, obj: Obj, data: Region | bytearray) -> None:
        last: StoreFullError | None = None
        for t in tiering.placement_order(obj.preferred):
            if t not in self.available:
                continue
            try:
                self._store_in(obj, data, t)
                return
            except StoreFullError as exc:
                last = exc
        raise last or self._full_error("dram", obj.size)

    def _store_in(self, obj: Obj, data: Region | bytearray, tier: str) -> None:
        src = self.view(data) if isinstance(data, Region) else memoryview(data)
        if tier == "dram":
            if isinstance(data, Region):
                obj.region = data
            else:
                obj.region = self._alloc_dram(obj.size, protect=obj)
                self.view(obj.region)[:] = src
        elif tier == "device":
            self._room("device", obj.size, protect=obj)
            obj.tensor = self.device.store(src)
        else:
            self._room("disk", obj.size, protect=obj)
            obj.disk_path = self.disk.write(src)
        if tier != "dram" and isinstance(data, Region):
            self._unref(data)
        obj.tier = tier

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
        self._release_storage(obj)

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
                self._promote(obj, target)
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
                    region = self._alloc_dram(obj.size, protect=obj, max_heat=heat)
                    obj.promoting = True
                except StoreFullError:
                    region = None
        into = self.view(region) if region is not None else memoryview(bytearray(obj.size))
        try:
            self._read_file(src, into)
            ok = True
        except OSError:
            ok = False
        with self.lock:
            if region is not None:
                obj.promoting = False
            unchanged = self.objects.get(key) is obj and (obj.tier, obj.disk_path, obj.l2_path) == src[:3]
            if not ok:
                if region is not None:
                    self._unref(region)
                if unchanged or not _retry:
                    raise StoreError(f"reading {key!r} from its {src[0] or 'l2'} file failed")
            else:  # served from a file (even when promoted on the way): a miss of the memory tiers
                self.counters[f"reads_{src[0] or 'l2'}"] += 1
                if region is None:
                    return ReadHandle(obj.meta, obj.size, src[0] or "l2", data=into)
                if unchanged:
                    self._release_storage(obj)
                    obj.region, obj.tier = region, "dram"
                    region.refs += 1
                    self.counters["promotions"] += 1
                # Otherwise the key changed meanwhile: serve the bytes read (a consistent
                # snapshot of the version looked up); the region goes with the reader's lease.
                return ReadHandle(obj.meta, obj.size, "dram", region=region)
        return self._acquire(key, timeout, _retry=False)  # the object moved under us: look it up again

    def _read_file(self, src: tuple, target: memoryview) -> None:
        tier, disk_path, l2_path, l2_offset = src
        if tier == "disk":
            self.disk.read_into(disk_path, target)
        else:
            L2Store.read_into(l2_path, l2_offset, target)

    def _read_cold(self, obj: Obj, target: memoryview) -> None:
        self._read_file((obj.tier, obj.disk_path, obj.l2_path, obj.l2_offset), target)

    def _promote(self, obj: Obj, target: str) -> None:
        heat = tiering.decayed(obj)
        try:
            if target == "dram":
                region = self._alloc_dram(obj.size, protect=obj, max_heat=heat)
                if obj.tier == "device":
                    self.view(region)[:] = self.device.to_host(obj.tensor)
                else:
                    self._read_cold(obj, self.view(region))
                self._release_storage(obj)
                obj.region, obj.tier = region, "dram"
            elif target == "device":
                self._room("device", obj.size, protect=obj, max_heat=heat)
                if obj.tier == "dram":
                    src = self.view(obj.region)
                else:
                    src = memoryview(bytearray(obj.size))
                    self._read_cold(obj, src)
                tensor = self.device.store(src)
                self._release_storage(obj)
                obj.tensor, obj.tier = tensor, "device"
            self.counters["promotions"] += 1
        except (StoreFullError, OSError):
            pass  # stays where it is; served from there

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
                self._unref(r)

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
            self._read_cold(obj, buf)
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
