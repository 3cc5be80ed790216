"""The worker's side of the version board (``kilorl.store.wire.board``): what it names, when.

A version is named once it is committed here with its bytes in the arena. A slot is
cleared before the region it names is freed or moved: the object table calls ``released``
under its lock from every path that lets go of a region. So a reader's copy, checked
against the slot, is never of reused memory.

**Names a client writes itself** (``claim``; ``kilorl.store.client.board_writes``). A
publisher on the worker's host may name its own versions. It writes their bytes into regions
it allocated (tickets) and names them on the board. Then it sends the commit, which the
worker stores with those regions adopted. Readers wake on the board write, one process hop
and a worker request earlier. A slot then has one writer, the claiming client. The worker
writes it only once the claim ends (the connection closed), and then only to clear it. The
seqlock needs exactly one writer per slot, and Python has no atomic read-modify-write on
shared memory to share one.

Since the worker cannot clear a claimed slot, it *holds* instead. It keeps a reference on
every region the client may name (each staged region, from the commit that brings it), so
an object that lets go of such a region does not free it. A hold ends once the slot is seen
naming another region (``sweep``, after each staged commit and on the housekeeping tick).
About one version per claimed name stays held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kilorl.store.errors import InvalidRequest
from kilorl.store.local.versions import parse_version_key
from kilorl.store.wire.board import AUTHORITATIVE, RAW, BoardWriter, supported

if TYPE_CHECKING:
    from kilorl.store.local.entries import Obj, Region
    from kilorl.store.local.objects import ObjectStore


class WorkerBoard:
    """Keeps a worker's board in step with its object table."""

    def __init__(self, store: ObjectStore, writer: BoardWriter):
        self.store = store
        self.writer = writer
        self.claims: dict[str, int] = {}
        """name -> the id of the connection that names its versions itself."""
        self.holds: dict[str, list[Region]] = {}
        """name (claimed) -> regions its slot may name, kept allocated by one reference each."""
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
            if name in self.claims:
                return  # its client names it
            if self.store.objects.get(key) is not obj or obj.tier != "dram" or obj.region is None:
                return  # replaced meanwhile, or its bytes are not in the arena: not named
            flags = (RAW if obj.meta.get("k") == "bytes" else 0) | (AUTHORITATIVE if authoritative else 0)
            self.writer.put(name, key, version, obj.region.offset, obj.size, flags)

    def released(self, obj: Obj) -> None:
        """Called by the object table, under its lock, before ``obj`` lets go of its region."""
        if obj.region is None:
            return
        parsed = parse_version_key(obj.key)
        if parsed is not None and parsed[0] not in self.claims:  # a claimed slot's regions are held
            self.writer.released(parsed[0], obj.key, obj.region.offset)

    # -- names a client writes itself ----------------------------------------------------
    def claim(self, conn_id: int, names: list[str]) -> None:
        """Connection ``conn_id`` names these versions on the board from now on."""
        with self.store.lock:
            for name in names:
                owner = self.claims.get(name)
                if owner is not None and owner != conn_id:
                    raise InvalidRequest(f"names: {name!r} is named on the board by another client")
            for name in names:
                if self.writer.slot(name) is None:
                    raise InvalidRequest(f"names: {name!r} has no board slot (longer than the board's "
                                         "names, or the board is full)")
            for name in names:
                if name in self.claims:
                    continue
                named = self.writer.names.pop(name, None)
                self.claims[name] = conn_id
                self.holds.setdefault(name, [])
                if named is not None:  # the worker named it last: keep that region until the client moves on
                    obj = self.store.objects.get(named[0])
                    if obj is not None and obj.region is not None and obj.region.offset == named[1]:
                        obj.region.refs += 1
                        self.holds[name].append(obj.region)

    def claimed_by(self, name: str, conn_id: int) -> bool:
        return self.claims.get(name) == conn_id

    def hold(self, name: str, region: Region) -> None:
        """Keep ``region`` allocated while the claimed slot of ``name`` may name it."""
        with self.store.lock:
            region.refs += 1
            self.holds.setdefault(name, []).append(region)

    def sweep(self, names: list[str] | None = None) -> None:
        """End the holds on regions the slots have moved past (a slot being rewritten keeps all)."""
        done: list[Region] = []
        with self.store.lock:
            for name in list(self.holds) if names is None else names:
                held = self.holds.get(name)
                if not held:
                    continue
                named = self._named_offset(name)
                if named is False:
                    continue
                done += [r for r in held if r.offset != named]
                self.holds[name] = [r for r in held if r.offset == named]
        if done:
            self.store.release(done)

    def unclaim(self, conn_id: int) -> None:
        """The connection ended: clear its slots (it writes no more), then end their holds."""
        done: list[Region] = []
        with self.store.lock:
            for name in [n for n, c in self.claims.items() if c == conn_id]:
                del self.claims[name]
                self.writer.clear(name)
                done += self.holds.pop(name, [])
        if done:
            self.store.release(done)

    def held_bytes(self) -> int:
        with self.store.lock:
            return sum(r.size for held in self.holds.values() for r in held)

    def _named_offset(self, name: str) -> int | None | bool:
        """The arena offset the slot of ``name`` names, None if it names nothing, False while
        it is being rewritten."""
        at = self.writer.slot(name)
        if at is None:
            return None
        seq, version, offset = self.writer.slot_state(at)
        if seq & 1:
            return False
        return offset if version >= 0 else None

    def close(self) -> None:
        self.store.on_release = None
        self.writer.close()
