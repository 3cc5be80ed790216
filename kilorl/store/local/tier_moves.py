"""Moving an object's bytes between the tiers of one worker (device, DRAM arena, disk, L2).

Split out of the object table (``kilorl.store.local.objects``): the table decides what
objects exist and who reads them; this part allocates with demotion of colder objects,
keeps the watermarks, places, promotes and reads cold copies. ``kilorl.store.local.tiering``
holds the policy (heat, preferences); this holds the moves. Every method runs under the
table's lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kilorl.store.errors import StoreFullError
from kilorl.store.local import tiering
from kilorl.store.local.arena import Allocator
from kilorl.store.local.config import ResolvedConfig
from kilorl.store.local.entries import Obj, Region
from kilorl.store.local.l2 import L2Store
from kilorl.store.wire.shm import Arena

log = logging.getLogger("kilorl.store.local.objects")


class TierMoves:
    """The tiers of one worker and the moves between them (victims chosen from ``objects``)."""

    def __init__(self, rc: ResolvedConfig, arena: Arena, objects: dict[str, Obj], counters: dict[str, int]):
        spec = rc.spec
        self.rc, self.arena, self.objects, self.counters = rc, arena, objects, counters
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
        self.on_release: Callable[[Obj], None] | None = None
        """Called before an object lets go of its arena region (the version board)."""
        self.l2_kept = False
        """Whether the worker has an L2 (the table's): objects may then be dropped to it."""

    def capacity(self, tier: str) -> int:
        return {"dram": self.arena.size, "disk": self.disk.capacity if self.disk else 0,
                "device": self.device.capacity if self.device else 0}[tier]

    def used(self, tier: str) -> int:
        return {"dram": self.alloc.used_bytes, "disk": self.disk.used if self.disk else 0,
                "device": self.device.used if self.device else 0}[tier]

    def unref(self, region: Region) -> None:
        region.refs -= 1
        if region.refs == 0:
            self.alloc.free(region.offset)

    def view(self, region: Region) -> memoryview:
        return self.arena.view[region.offset:region.offset + region.size]

    def full_error(self, tier: str, size: int) -> StoreFullError:
        in_tier = [o for o in self.objects.values() if o.tier == tier]
        pinned = sum(o.size for o in in_tier if o.pinned)
        live = sum(o.size for o in in_tier)
        return StoreFullError(
            f"{tier} tier full: need {size} bytes, {self.capacity(tier) - self.used(tier)} of "
            f"{self.capacity(tier)} free (largest block {self.alloc.largest_free() if tier == 'dram' else 'n/a'}); "
            f"{pinned} bytes pinned, {self.used(tier) - live if tier == 'dram' else 0} bytes held by readers "
            f"of replaced objects or in-flight writes; nothing colder could be demoted")

    def alloc_dram(self, size: int, protect: Obj | None = None, max_heat: float | None = None) -> Region:
        off = self.alloc.alloc(size)
        if off is None:
            for victim in self.victims("dram", protect, max_heat):
                if self.demote(victim):
                    off = self.alloc.alloc(size)
                    if off is not None:
                        break
        if off is None:
            raise self.full_error("dram", size)
        return Region(off, size)

    def room(self, tier: str, size: int, protect: Obj | None = None, max_heat: float | None = None) -> None:
        if size > self.capacity(tier):
            raise self.full_error(tier, size)
        if self.capacity(tier) - self.used(tier) >= size:
            return
        for victim in self.victims(tier, protect, max_heat):
            if self.demote(victim) and self.capacity(tier) - self.used(tier) >= size:
                return
        raise self.full_error(tier, size)

    def victims(self, tier: str, protect: Obj | None, max_heat: float | None) -> list[Obj]:
        now = time.monotonic()
        out = tiering.coldest_first((o for o in self.objects.values() if o.tier == tier and o is not protect), now)
        if max_heat is not None:
            out = [o for o in out if tiering.decayed(o, now) < max_heat]
        return out

    def demote(self, obj: Obj) -> bool:
        """Moves ``obj`` one tier down (or drops its memory copy if L2 holds it)."""
        try:
            if obj.tier == "device":
                data = self.device.to_host(obj.tensor)
                try:
                    region = self.alloc_dram(obj.size, protect=obj)
                except StoreFullError:
                    return self.to_disk_or_l2(obj, data)
                self.view(region)[:] = data
                self.release_storage(obj)
                obj.region, obj.tier = region, "dram"
            elif obj.tier == "dram":
                return self.to_disk_or_l2(obj, self.view(obj.region))
            elif obj.tier == "disk":
                if not obj.l2_durable:
                    return False
                self.release_storage(obj)
                self.counters["evictions_to_l2"] += 1
            else:
                return False
        except OSError:
            log.exception("demotion of %r failed", obj.key)
            return False
        self.counters["demotions"] += 1
        return True

    def to_disk_or_l2(self, obj: Obj, data: memoryview) -> bool:
        if self.disk is not None and obj.tier != "disk":
            try:
                self.room("disk", obj.size, protect=obj)
                path = self.disk.write(data)
            except StoreFullError:
                path = None
            if path is not None:
                self.release_storage(obj)
                obj.disk_path, obj.tier = path, "disk"
                self.counters["demotions"] += 1
                return True
        if obj.l2_durable:
            self.release_storage(obj)
            self.counters["evictions_to_l2"] += 1
            return True
        return False

    def release_storage(self, obj: Obj) -> None:
        if obj.region is not None:
            if self.on_release is not None:
                self.on_release(obj)  # e.g. the version board forgets the region before it is freed
            self.unref(obj.region)
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
        if not self.l2_kept and (tier == "disk" or (tier == "dram" and self.disk is None)):
            return  # nowhere to demote to: don't scan every object on every write
        for victim in self.victims(tier, protect, None):
            if self.used(tier) <= spec.low_watermark * cap:
                break
            self.demote(victim)

    def place(self, obj: Obj, data: Region | bytearray) -> None:
        last: StoreFullError | None = None
        for t in tiering.placement_order(obj.preferred):
            if t not in self.available:
                continue
            try:
                self.store_in(obj, data, t)
                return
            except StoreFullError as exc:
                last = exc
        raise last or self.full_error("dram", obj.size)

    def store_in(self, obj: Obj, data: Region | bytearray, tier: str) -> None:
        src = self.view(data) if isinstance(data, Region) else memoryview(data)
        if tier == "dram":
            if isinstance(data, Region):
                obj.region = data
            else:
                obj.region = self.alloc_dram(obj.size, protect=obj)
                self.view(obj.region)[:] = src
        elif tier == "device":
            self.room("device", obj.size, protect=obj)
            obj.tensor = self.device.store(src)
        else:
            self.room("disk", obj.size, protect=obj)
            obj.disk_path = self.disk.write(src)
        if tier != "dram" and isinstance(data, Region):
            self.unref(data)
        obj.tier = tier

    def read_file(self, src: tuple, target: memoryview) -> None:
        tier, disk_path, l2_path, l2_offset = src
        if tier == "disk":
            self.disk.read_into(disk_path, target)
        else:
            L2Store.read_into(l2_path, l2_offset, target)

    def read_cold(self, obj: Obj, target: memoryview) -> None:
        self.read_file((obj.tier, obj.disk_path, obj.l2_path, obj.l2_offset), target)

    def promote(self, obj: Obj, target: str) -> None:
        heat = tiering.decayed(obj)
        try:
            if target == "dram":
                region = self.alloc_dram(obj.size, protect=obj, max_heat=heat)
                if obj.tier == "device":
                    self.view(region)[:] = self.device.to_host(obj.tensor)
                else:
                    self.read_cold(obj, self.view(region))
                self.release_storage(obj)
                obj.region, obj.tier = region, "dram"
            elif target == "device":
                self.room("device", obj.size, protect=obj, max_heat=heat)
                if obj.tier == "dram":
                    src = self.view(obj.region)
                else:
                    src = memoryview(bytearray(obj.size))
                    self.read_cold(obj, src)
                tensor = self.device.store(src)
                self.release_storage(obj)
                obj.tensor, obj.tier = tensor, "device"
            self.counters["promotions"] += 1
        except (StoreFullError, OSError):
            pass  # stays where it is; served from there

