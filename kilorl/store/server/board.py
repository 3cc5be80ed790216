"""The worker's side of the version board (``kilorl.store.wire.board``): what it names, when.

A version is named once it is committed here with its bytes in the arena; a slot is
cleared before the region it names is freed or moved (the object table calls ``released``
under its lock from every path that lets go of a region), so a reader's copy checked
against the slot is never of reused memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kilorl.store.local.versions import parse_version_key
from kilorl.store.wire.board import AUTHORITATIVE, RAW, BoardWriter, supported

if TYPE_CHECKING:
    from kilorl.store.local.entries import Obj
    from kilorl.store.local.objects import ObjectStore


class WorkerBoard:
    """Keeps a worker's board in step with its object table."""

    def __init__(self, store: ObjectStore, writer: BoardWriter):
        self.store = store
        self.writer = writer
        store.on_release = self.released

    @classmethod
    def create(cls, store: ObjectStore) -> WorkerBoard | None:
        """None where boards are not supported (clients then use requests only)."""
        if not supported():
            return None
        return cls(store, BoardWriter.create())

    @property
    def path(self) -> str:
        return str(self.writer.arena.path)

    @property
    def size(self) -> int:
        return self.writer.arena.size

    def committed(self, name: str, version: int, key: str, obj: Obj, authoritative: bool) -> None:
        """``version`` of ``name`` is committed here as ``obj`` (stored under ``key``)."""
        with self.store.lock:
            if self.store.objects.get(key) is not obj or obj.tier != "dram" or obj.region is None:
                return  # replaced meanwhile, or its bytes are not in the arena: not named
            flags = (RAW if obj.meta.get("k") == "bytes" else 0) | (AUTHORITATIVE if authoritative else 0)
            self.writer.put(name, key, version, obj.region.offset, obj.size, flags)

    def released(self, obj: Obj) -> None:
        """Called by the object table, under its lock, before ``obj`` lets go of its region."""
        if obj.region is None:
            return
        parsed = parse_version_key(obj.key)
        if parsed is not None:
            self.writer.released(parsed[0], obj.key, obj.region.offset)

    def close(self) -> None:
        self.store.on_release = None
        self.writer.close()
