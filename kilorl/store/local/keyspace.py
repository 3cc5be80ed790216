"""Introspection and upkeep of a worker's object table: TTLs, pins, key listing, stats, sweeps.

A component over an ``ObjectStore`` (objects.py) using only its public interface, kept
apart so the table's tier moves and I/O code stays separate from bookkeeping; every
method takes the store's lock.
"""

from __future__ import annotations

import time
from typing import Any

from kilorl.store.errors import KeyNotFound
from kilorl.store.local import tiering
from kilorl.store.local.objects import ObjectStore


class KeySpace:
    """TTL, pin, key listing, location, sweep and stats over one ``ObjectStore``."""

    def __init__(self, store: ObjectStore):
        self.store = store

    def expire(self, key: str, ttl: float | None) -> bool:
        with self.store.lock:
            obj = self.store.live(key)
            if obj is None:
                return False
            obj.expires_at = time.time() + ttl if ttl is not None else None
            return True

    def keys(self, prefix: str, include_hidden: bool = False) -> list[str]:
        with self.store.lock:
            now = time.time()
            return sorted(k for k, o in self.store.objects.items()
                          if k.startswith(prefix) and (include_hidden or not k.startswith("\x00"))
                          and (o.expires_at is None or o.expires_at > now))

    def pin(self, key: str, on: bool) -> None:
        with self.store.lock:
            obj = self.store.live(key)
            if obj is None:
                raise KeyNotFound(f"key {key!r} not found")
            obj.pinned = on

    def locate(self, key: str) -> dict[str, Any]:
        with self.store.lock:
            obj = self.store.live(key)
            if obj is None:
                raise KeyNotFound(f"key {key!r} not found")
            return {"tier": obj.tier or "l2", "preferred": obj.preferred, "size": obj.size,
                    "offset": obj.region.offset if obj.region else None, "pinned": obj.pinned,
                    "heat": tiering.decayed(obj), "l2": obj.l2_mode, "l2_durable": obj.l2_durable}

    def sweep(self) -> None:
        """Periodic housekeeping: expire TTLs, push tiers back under their watermarks."""
        with self.store.lock:
            now = time.time()
            for obj in [o for o in self.store.objects.values() if o.expires_at is not None and o.expires_at <= now]:
                self.store.live(obj.key)
            for tier in self.store.available:
                self.store.enforce_watermarks(tier)

    def stats(self) -> dict[str, Any]:
        with self.store.lock:
            tiers = {}
            for tier in tiering.TIER_ORDER:
                if tier in self.store.available:
                    objs = [o for o in self.store.objects.values() if o.tier == tier]
                    tiers[tier] = {"used": self.store.used(tier), "capacity": self.store.capacity(tier), "objects": len(objs),
                                   "pinned": sum(1 for o in objs if o.pinned)}
            tiers["l2_only"] = {"objects": sum(1 for o in self.store.objects.values() if o.tier is None)}
            return {"objects": len(self.store.objects), "tiers": tiers, "counters": dict(self.store.counters),
                    "l2": {"dir": self.store.rc.spec.l2_dir, "queue": self.store.l2.queue.qsize() if self.store.l2 else 0,
                           "flushed": self.store.l2.flushed if self.store.l2 else 0}}
