"""The version board: a worker's newest local versions, readable from shared memory without a request.

A small shared-memory file beside the arena. For every published name whose newest version
this worker committed locally into the arena, one slot says where that version's bytes lie
(``version``, arena ``offset``, ``size``). A reader on the host reads a version by copying
those bytes straight out of the arena and checking afterwards that the slot did not change
(a seqlock: the worker makes a slot's ``seq`` odd while it rewrites the slot, and
invalidates a slot *before* the region it names can be freed), so a copy is either one
whole committed version or discarded. A reader waiting for a newer version sleeps on the
board's generation word with a futex, which the worker wakes after every change: the wake-up
reaches every waiting reader in one system call, and none of them costs the worker a
request, a thread wake-up or a reply.

Why it exists (measured, ``benchmarks/param_sync_bench.py``, 10K-parameter policy, 4 actors,
2 cores): over the socket a wake-up is a reply built by one worker thread per reader, under
the worker's one GIL, and a 40 KB read costs 0.36 ms in one process against a 0.09 ms ping.

A slot has exactly one writer: the worker, or a client on the host the worker lent it to
(``ClientSlots``: a publisher naming its own versions, ``kilorl.store.server.board``).

Only for small reads (copies; large versions keep the leased zero-copy path) and only on
Linux x86-64, where the futex call is known and the CPU keeps loads in order (TSO), which
the seqlock relies on: Python has no memory fences. Elsewhere the worker offers no board and
clients use requests, with the same results.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
import time
import zlib
from dataclasses import dataclass

from kilorl.store.wire.shm import Arena

MAGIC = b"KRLBRD01"
HEADER = 64
"""magic (8) | generation u32 (the futex word) | slots u32 | slot size u32 | worker pid u32 (for tools)."""
SLOT = 256
NAME_AT = 48
MAX_NAME = SLOT - NAME_AT
SLOTS = 1024
PROBES = 64
_SLOT = struct.Struct("<IIqQQII")
"""seq, name length, version (-1: none), offset, size, flags, reserved."""
_SEQ = struct.Struct("<I")
RAW = 1
"""The value is plain bytes (a whole read needs no decoding metadata)."""
AUTHORITATIVE = 2
"""This worker's version history is the name's only one (a worker alone): its newest local
version is the newest there is."""

_FUTEX_WAIT_BITSET, _FUTEX_WAKE_BITSET, _SYS_FUTEX = 9, 10, 202  # x86-64 Linux; not FUTEX_PRIVATE: processes share the word
"""A waiter sleeps on the bit of its slot (slot index mod 32) and a write wakes only the
waiters of that bit: a publish of several parts wakes a reader once, for its anchor."""


def supported() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


_libc = None


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc.syscall


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _slot_of(name: bytes, probe: int) -> int:
    return (zlib.crc32(name) + probe) % SLOTS


def _bit(at: int) -> int:
    """The futex wake bit of the slot at byte ``at``."""
    return 1 << ((at - HEADER) // SLOT % 32)


@dataclass(frozen=True)
class Entry:
    seq: int
    version: int
    offset: int
    size: int
    flags: int


class _Board:
    def __init__(self, arena: Arena):
        self.arena = arena
        self.view = arena.view
        self._gen = ctypes.c_uint32.from_buffer(arena.mm, 8)  # the futex word
        self._gen_addr = ctypes.addressof(self._gen)
        self._slots: dict[str, int] = {}
        """name -> its slot's byte position (a claimed slot keeps its name for good)."""

    @property
    def generation(self) -> int:
        return self._gen.value

    def _located(self, name: str) -> int | None:
        """The slot position of ``name``, looked up once (None while it has no slot)."""
        at = self._slots.get(name)
        if at is None:
            at = self._find(name.encode())
            if at is not None:
                self._slots[name] = at
        return at

    def _find(self, name: bytes) -> int | None:
        for probe in range(PROBES):
            at = HEADER + _slot_of(name, probe) * SLOT
            n = struct.unpack_from("<I", self.view, at + 4)[0]
            if n == 0:
                return None
            if n == len(name) and self.view[at + NAME_AT:at + NAME_AT + n] == name:
                return at
        return None

    def slot_state(self, at: int) -> tuple[int, int, int]:
        """``(seq, version, offset)`` of the slot at byte ``at`` now."""
        seq, _, version, offset, *_ = _SLOT.unpack_from(self.view, at)
        return seq, version, offset

    def write(self, at: int, seq: int, version: int, offset: int, size: int, flags: int, wake: bool = True) -> None:
        """Rewrites the slot at ``at`` under its seqlock; ``wake``: wake its bit's waiters now
        (else the caller does, with ``wake_bits``, once several slots are written)."""
        name_len = struct.unpack_from("<I", self.view, at + 4)[0]
        struct.pack_into("<I", self.view, at, (seq + 1) & 0xFFFFFFFF)  # odd: being rewritten
        _SLOT.pack_into(self.view, at, (seq + 1) & 0xFFFFFFFF, name_len, version, offset, size, flags, 0)
        struct.pack_into("<I", self.view, at, (seq + 2) & 0xFFFFFFFF)
        self._gen.value = (self._gen.value + 1) & 0xFFFFFFFF
        if wake:
            self.wake_bits(_bit(at))

    def wake_bits(self, bits: int) -> None:
        """Wakes every waiter on any of ``bits`` (one system call for several slots)."""
        _syscall()(_SYS_FUTEX, ctypes.c_void_p(self._gen_addr), _FUTEX_WAKE_BITSET, 0x7FFFFFFF, None, None, bits)


class BoardWriter(_Board):
    """The worker's side; every method is called under the object table's lock."""

    @classmethod
    def create(cls) -> BoardWriter:
        arena = Arena.create(HEADER + SLOTS * SLOT)
        arena.view[0:8] = MAGIC
        struct.pack_into("<III", arena.view, 12, SLOTS, SLOT, os.getpid())
        return cls(arena)

    def __init__(self, arena: Arena):
        super().__init__(arena)
        self.names: dict[str, tuple[str, int]] = {}
        """name -> (hidden key, arena offset) of the version its slot names now."""

    def _slot(self, name: str, claim: bool) -> int | None:
        at = self._located(name)
        if at is None and claim and len(raw := name.encode()) <= MAX_NAME:
            at = self._claim(raw)
            if at is not None:
                self._slots[name] = at
        return at

    def put(self, name: str, key: str, version: int, offset: int, size: int, flags: int) -> bool:
        """Names ``version`` of ``name`` (stored under ``key`` at ``offset``) as the newest;
        a version not newer than the slot's is ignored. False when the name has no slot."""
        at = self._slot(name, claim=True)
        if at is None:
            return False
        seq, _, old, *_ = _SLOT.unpack_from(self.view, at)
        if old >= version:
            return True
        self.write(at, seq, version, offset, size, flags)
        self.names[name] = (key, offset)
        return True

    def released(self, name: str, key: str, offset: int) -> None:
        """The region at ``offset`` of ``key`` is about to be freed or moved: if the slot of
        ``name`` names it, the slot says "none" before the memory can be reused."""
        if self.names.get(name) != (key, offset):
            return
        del self.names[name]
        at = self._slot(name, claim=False)
        if at is not None:
            self.write(at, _SLOT.unpack_from(self.view, at)[0], -1, 0, 0, 0)

    def slot(self, name: str) -> int | None:
        """The byte position of the slot of ``name``, claimed now if it has none (None: no room)."""
        return self._slot(name, claim=True)

    def clear(self, name: str) -> None:
        """The slot of ``name`` says "none", whatever it named (its own client is gone)."""
        self.names.pop(name, None)
        at = self._slot(name, claim=False)
        if at is not None:
            self.write(at, self.slot_state(at)[0], -1, 0, 0, 0)

    def _claim(self, raw: bytes) -> int | None:
        for probe in range(PROBES):
            at = HEADER + _slot_of(raw, probe) * SLOT
            if struct.unpack_from("<I", self.view, at + 4)[0] == 0:
                self.view[at + NAME_AT:at + NAME_AT + len(raw)] = raw
                _SLOT.pack_into(self.view, at, 0, len(raw), -1, 0, 0, 0, 0)
                return at
        return None

    def close(self) -> None:
        del self._gen
        self.arena.close()


class ClientSlots(_Board):
    """A client's side of the slots the worker let it write (``WorkerBoard.claim``): the client
    names its own versions, with the worker's seqlock protocol; the worker no longer writes them."""

    def find(self, name: str) -> bool:
        """Whether ``name`` has a slot (the worker made it when it lent it)."""
        return self._located(name) is not None

    def name(self, name: str, version: int, offset: int, size: int, flags: int, wake: bool = True) -> int:
        """``version`` of ``name`` (bytes at ``offset``) is the newest; a slot already naming a
        newer one is left as it is. Returns the slot's wake bit (0: unchanged); with ``wake``
        False the caller wakes it (``wake_bits``), e.g. once for every part of a publish."""
        at = self._slots[name]
        seq, old, _ = self.slot_state(at)
        if old >= version:
            return 0
        self.write(at, seq, version, offset, size, flags, wake)
        return _bit(at)

    def close(self) -> None:
        if hasattr(self, "_gen"):
            del self._gen  # the mapping is the client's board reader's, closed with it

    def withdraw(self, name: str, version: int) -> None:
        """The slot of ``name`` says "none" if it still names ``version`` (a refused publish)."""
        at = self._slots[name]
        seq, old, _ = self.slot_state(at)
        if old == version:
            self.write(at, seq, -1, 0, 0, 0)


class BoardReader(_Board):
    """A client's side: look-ups, seqlock-checked copies out of the arena, futex waits."""

    @classmethod
    def attach(cls, path: str, size: int) -> BoardReader | None:
        if not supported():
            return None
        arena = Arena.attach(path, size)
        if bytes(arena.view[0:8]) != MAGIC or struct.unpack_from("<II", arena.view, 12) != (SLOTS, SLOT):
            arena.close()
            return None
        return cls(arena)

    def __init__(self, arena: Arena):
        super().__init__(arena)
        self.stale = False
        """Set when the client moved to another connection: this board may be a dead
        worker's, so no read is served from it (its mapping stays valid while in use)."""

    def entry(self, name: str) -> Entry | None:
        """The slot of ``name`` now (None: no slot, or one being rewritten)."""
        at = self._located(name)
        if at is None:
            return None
        seq, _, version, offset, size, flags, _ = _SLOT.unpack_from(self.view, at)
        return None if seq & 1 else Entry(seq, version, offset, size, flags)

    def unchanged(self, name: str, entry: Entry) -> bool:
        return struct.unpack_from("<I", self.view, self._slots[name])[0] == entry.seq

    def position(self, name: str) -> int:
        """The byte position of the slot of ``name`` (one ``entry`` found it)."""
        return self._slots[name]

    def raw_entry(self, name: str) -> tuple[int, int, int, int, int, int] | None:
        """``(position, seq, version, offset, size, flags)`` of the slot of ``name`` now (None:
        no slot): ``entry`` without the object, for the per-part checks of a copy."""
        at = self._located(name)
        if at is None:
            return None
        seq, _, version, offset, size, flags, _ = _SLOT.unpack_from(self.view, at)
        return at, seq, version, offset, size, flags

    def unchanged_at(self, slots: list[tuple[int, int]]) -> bool:
        """Whether every ``(position, seq)`` slot still has that seq (no rewrite since)."""
        view = self.view
        for at, seq in slots:
            if _SEQ.unpack_from(view, at)[0] != seq:
                return False
        return True

    def wait_change(self, name: str, generation: int, until: float) -> None:
        """Sleeps until the slot of ``name`` (or one sharing its wake bit) changes after
        ``generation`` was read, or until ``until`` (``time.monotonic()`` clock)."""
        at = self._slots.get(name)
        if at is None or until <= time.monotonic():
            return
        ts = _Timespec(int(until), int((until % 1) * 1e9))  # absolute, CLOCK_MONOTONIC
        _syscall()(_SYS_FUTEX, ctypes.c_void_p(self._gen_addr), _FUTEX_WAIT_BITSET, generation & 0xFFFFFFFF,
                   ctypes.byref(ts), None, _bit(at))

    def close(self) -> None:
        self.stale = True
        if hasattr(self, "_gen"):  # once: a second close (e.g. a finalizer after close()) does nothing
            del self._gen
            self.arena.close()
