"""This worker's registered copies of mesh keys, and the pulls in flight.

A ``LocalCopy`` ties a key's cluster version to the local object's generation, so a
newer local write (not yet registered) is never mistaken for the copy. ``floor`` is
the lowest version a copy may have after an invalidation: a copy fetched while a newer
version was registered is refused (``StaleCopy``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kilorl.store.errors import StaleCopy
from kilorl.store.local.entries import Region
from kilorl.store.local.objects import ObjectStore


@dataclass
class LocalCopy:
    ver: int
    primary: bool
    """True for bytes written through this worker (or handed to it); False for replicas."""
    gen: int
    """The local object's generation."""


class LocalCopies:
    """Copies held here (``local``), invalidation floors and in-flight pulls; one lock."""

    def __init__(self, store: ObjectStore, lock: threading.RLock):
        self.store = store
        self.lock = lock
        self.local: dict[str, LocalCopy] = {}
        self.floor: dict[str, int] = {}
        self.inflight: dict[str, Any] = {}  # key -> transfer.Inflight
        self.counters = {"bytes_served": 0, "invalidated": 0}

    def keep(self, key: str, ver: int, meta: dict[str, Any], size: int, data: Region | bytearray,
             primary: bool = False) -> None:
        """Stores fetched bytes as this worker's copy of ``key`` at ``ver`` (unless outdated)."""
        with self.lock:
            if ver < self.floor.get(key, 0):
                if isinstance(data, Region):
                    self.store.release([data])
                raise StaleCopy(f"{key!r} version {ver} was replaced while it was fetched")
            obj, _ = self.store.put(key, meta, size, data, tier=None, ttl=None, l2_mode=None, pin=False)
            self.local[key] = LocalCopy(ver, primary, obj.gen)

    def register(self, key: str, ver: int, gen: int, primary: bool) -> None:
        """Records an object already in the store as the copy of ``key`` at ``ver``."""
        with self.lock:
            if ver < self.floor.get(key, 0):
                # A newer version was registered (and its invalidation reached us) before
                # our own registration returned: this object is already outdated.
                self.store.delete_generation(key, gen)
            elif self.store.generation(key) == gen:  # not replaced by a later local write meanwhile
                self.local[key] = LocalCopy(ver, primary, gen)

    def get(self, key: str) -> LocalCopy | None:
        """This worker's registered copy of ``key`` if the store still holds exactly it."""
        with self.lock:
            copy = self.local.get(key)
        if copy is None or self.store.generation(key) != copy.gen:
            return None
        return copy

    def version(self, key: str) -> int | None:
        copy = self.get(key)
        return copy.ver if copy is not None else None

    def invalidate(self, key: str, ver: int) -> None:
        """Drops the local copy of ``key`` if it is older than ``ver`` (L2 files stay)."""
        with self.lock:
            self.floor[key] = max(self.floor.get(key, 0), ver)
            copy = self.local.get(key)
            if copy is None or copy.ver >= ver:
                return  # no registered copy: a local write in progress is newer than ``ver``
            del self.local[key]
            self.counters["invalidated"] += self.store.delete_generation(key, copy.gen)

    def promote(self, key: str, ver: int) -> bool:
        """Makes this worker's full copy of ``key`` at ``ver`` a primary (its holder died)."""
        with self.lock:
            copy = self.local.get(key)
            if copy is None or copy.ver != ver or self.store.generation(key) != copy.gen:
                return False
            copy.primary = True
            return True

    def count_served(self, nbytes: int) -> None:
        with self.lock:
            self.counters["bytes_served"] += nbytes

    def primaries(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(k, c.ver) for k, c in self.local.items() if c.primary]

    def census(self) -> tuple[int, int]:
        """(primaries, replicas) held here."""
        with self.lock:
            primaries = sum(1 for c in self.local.values() if c.primary)
            return primaries, len(self.local) - primaries
