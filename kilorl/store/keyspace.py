"""Key-space operations and introspection of the object table (delete, TTL, keys, stats).

A mixin of ``ObjectStore`` (objects.py), split out to keep placement and I/O apart from
bookkeeping; every method takes the store's lock.
"""

from __future__ import annotations

import time
from typing import Any

from kilorl.store import placement
from kilorl.store.errors import KeyNotFound


class KeySpaceMixin:
    """Needs ``lock``, ``objects``, ``_live``, ``_remove``, tier helpers from ObjectStore."""

    # -- key space ---------------------------------------------------------------------
    def delete(self, keys: list[str]) -> tuple[int, list[tuple[str, str]]]:
        """Deletes keys; returns (count, [(key, l2_mode)] whose L2 copies must go too)."""
        n, l2 = 0, []
        with self.lock:
            for key in keys:
                obj = self._live(key)
                if obj is None:
                    continue
                self._remove(obj)
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
            self._remove(obj)
            return True

    def generation(self, key: str) -> int | None:
        with self.lock:
            obj = self.objects.get(key)
            return obj.gen if obj is not None else None

    def exists(self, keys: list[str]) -> list[bool]:
        with self.lock:
            return [self._live(k) is not None for k in keys]

    def expire(self, key: str, ttl: float | None) -> bool:
        with self.lock:
            obj = self._live(key)
            if obj is None:
                return False
            obj.expires_at = time.time() + ttl if ttl is not None else None
            return True

    def keys(self, prefix: str, include_hidden: bool = False) -> list[str]:
        with self.lock:
            now = time.time()
            return sorted(k for k, o in self.objects.items()
                          if k.startswith(prefix) and (include_hidden or not k.startswith("\x00"))
                          and (o.expires_at is None or o.expires_at > now))

    def pin(self, key: str, on: bool) -> None:
        with self.lock:
            obj = self._live(key)
            if obj is None:
                raise KeyNotFound(f"key {key!r} not found")
            obj.pinned = on

    def locate(self, key: str) -> dict[str, Any]:
        with self.lock:
            obj = self._live(key)
            if obj is None:
                raise KeyNotFound(f"key {key!r} not found")
            return {"tier": obj.tier or "l2", "preferred": obj.preferred, "size": obj.size,
                    "offset": obj.region.offset if obj.region else None, "pinned": obj.pinned,
                    "heat": placement.decayed(obj), "l2": obj.l2_mode, "l2_durable": obj.l2_durable}

    def sweep(self) -> None:
        """Periodic housekeeping: expire TTLs, push tiers back under their watermarks."""
        with self.lock:
            now = time.time()
            for obj in [o for o in self.objects.values() if o.expires_at is not None and o.expires_at <= now]:
                self._live(obj.key)
            for tier in self.available:
                self._enforce_watermarks(tier)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            tiers = {}
            for tier in placement.TIER_ORDER:
                if tier in self.available:
                    objs = [o for o in self.objects.values() if o.tier == tier]
                    tiers[tier] = {"used": self._used(tier), "capacity": self._capacity(tier), "objects": len(objs),
                                   "pinned": sum(1 for o in objs if o.pinned)}
            tiers["l2_only"] = {"objects": sum(1 for o in self.objects.values() if o.tier is None)}
            return {"objects": len(self.objects), "tiers": tiers, "counters": dict(self.counters),
                    "l2": {"dir": self.rc.spec.l2_dir, "queue": self.l2.queue.qsize() if self.l2 else 0,
                           "flushed": self.l2.flushed if self.l2 else 0}}
