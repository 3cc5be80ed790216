"""Reads of published versions served from the worker's version board (``kilorl.store.wire.board``).

``get_versions`` tries this first on the worker's host. It answers only what it can answer
exactly as the worker would: a version the board names whole (every part at the anchor's
version number, in the arena), small enough to copy (``MAX_COPY``); the newest version only
where the board is authoritative (a worker alone) or a ``min_version`` is asked for; and it
waits on the board's futex, checking with the worker every ``CHECK_S`` that the version it
waits for is not held elsewhere (a mesh whose publisher writes to another worker). Anything
else returns None and the caller sends the request.

What it reads once the version is there is a ``Copier``: by default a copy of every read into
one new buffer (``get_versions``); the version number alone (``head_only``: a wait); or the
bytes straight into a reader's own arrays (``CopyInto``: ``read_into``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kilorl.store.client.types import Versioned
from kilorl.store.errors import Reconnected, StoreError, StoreTimeout
from kilorl.store.wire.board import AUTHORITATIVE, RAW, BoardReader, Entry

MAX_COPY = 1 << 20
"""Bytes a board read copies at most; larger versions take the leased zero-copy path."""
CHECK_S = 0.1
"""How long a board wait sleeps before it asks the worker whether the version exists elsewhere."""
NAME_GRACE_S = 0.05
"""A version the worker holds but the board does not name yet (the worker names it just after
the commit) gets this long before the request reads it instead."""
ALIGN = 64
"""Where in a board read's buffer its ranges start (tensors in them keep their alignment)."""
TRIES = 4
"""Copies discarded in a row (the version was replaced under the read) before falling back."""

Reads = list[tuple[str, list[tuple[int, int]] | None]]
Copier = Callable[[BoardReader, memoryview, Reads, Entry], tuple[Versioned, int] | None]
"""Copies ``reads`` at the version of the anchor's slot ``head``: ``(result, bytes copied)``,
or None when the slots changed under the copy (or a part is not named at that version)."""


def board_read(board: BoardReader, arena: memoryview, reads: Reads, version: int | None,
               min_version: int | None, timeout: float | None,
               latest: Callable[[str], int | None],
               connected: Callable[[], bool],
               copy: Copier | None = None) -> tuple[tuple[Versioned, int] | None, float | None]:
    """``((result, bytes copied) or None, the timeout left for the request that replaces a None)``.

    ``copy``: what is read once the version is there (default: every read into one new buffer)."""
    copy = _copy if copy is None else copy
    anchor = reads[0][0]
    if not connected():  # a board outlives its worker: the request finds out what happened
        return None, timeout
    deadline = None if timeout is None else time.monotonic() + timeout
    check_at = time.monotonic() + CHECK_S
    tries = 0
    seen_held = False
    while True:
        if board.stale:  # the client reconnected (maybe inside ``latest``): the request decides
            return None, _left(deadline)
        generation = board.generation
        head = board.entry(anchor)
        if head is None:
            return None, timeout
        if head.seq & 1 == 0 and head.version >= 0:
            if version is not None:
                if head.version != version:
                    return None, _left(deadline)
                wanted = True
            elif min_version is not None:
                wanted = head.version >= min_version
            else:
                wanted = bool(head.flags & AUTHORITATIVE)
                if not wanted:
                    return None, timeout
            if wanted:
                got = copy(board, arena, reads, head)
                if got is not None:
                    return got, None
                tries += 1
                if tries >= TRIES:
                    return None, _left(deadline)
                continue
        elif head.version < 0 and head.seq & 1 == 0:
            return None, _left(deadline)  # the newest local version left the arena (or was moved)
        if version is not None or min_version is None:
            continue  # a slot being rewritten: read it again
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise StoreTimeout(f"{anchor!r} did not reach version {min_version} within {timeout}s")
        if now >= check_at:
            if not connected():
                return None, _left(deadline)
            try:
                held = latest(anchor)
            except Reconnected:
                raise  # the worker may have come back empty: its caller decides (StoreClient(replay=False))
            except StoreError:
                return None, _left(deadline)
            if held is not None and held >= min_version:
                if seen_held:
                    return None, _left(deadline)  # there, but not named here: the request reads it
                seen_held = True  # or committed a moment ago and named next: look once more
                check_at = now + NAME_GRACE_S
            else:
                check_at = now + CHECK_S
        board.wait_change(anchor, generation, min(check_at, deadline or check_at))


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _copy(board: BoardReader, arena: memoryview, reads: Reads, head: Entry) -> tuple[Versioned, int] | None:
    """Copies of every read at ``head``'s version and their bytes, or None if a part is not
    named at that version (or the slots changed during the copy, or the read is too large).

    Every copy lands in one buffer, in the order of ``reads``. The ranges lie end to end from
    an aligned start (``ALIGN``; a whole value before them ends padded), so a reader whose
    ranges follow each other in its layout gets them adjacent in memory too, and a tensor
    that a shard cut split can still be one view (``kilorl.params.resharding``).

    Raw slot tuples, not ``Entry`` objects, and an uninitialised buffer: this runs once per
    version in every reader on the host, and its Python is most of a small read's cost."""
    slots: list[tuple[int, int]] = []  # (slot position, seq) of every part, checked after the copy
    spans: list[tuple[int, bool, int, int, int]] = []  # (read index, whole value?, arena offset, length, at)
    pos = 0
    version = head.version
    for i, (name, ranges) in enumerate(reads):
        if i == 0:
            at, seq, offset, size, flags = board.position(name), head.seq, head.offset, head.size, head.flags
        else:
            got = board.raw_entry(name)
            if got is None:
                return None
            at, seq, v, offset, size, flags = got
            if seq & 1 or v != version:
                return None
        slots.append((at, seq))
        if ranges is None:
            if not flags & RAW:
                return None
            spans.append((i, True, offset, size, pos))
            pos += size
            continue
        for o, n in ranges:
            if o < 0 or n < 0 or o + n > size:
                return None  # the request gives the error
        if not spans or spans[-1][1]:  # the first ranges, or ranges after a whole value: aligned
            pos = -(-pos // ALIGN) * ALIGN
        for o, n in ranges:
            spans.append((i, False, offset + o, n, pos))
            pos += n
        if pos > MAX_COPY:
            return None
    if pos > MAX_COPY:
        return None
    buf = memoryview(np.empty(pos, np.uint8))  # every byte a span covers is written below
    values: list[Any] = [[] if ranges is not None else None for _, ranges in reads]
    copied = 0
    for i, whole, at, n, to in spans:
        buf[to:to + n] = arena[at:at + n]
        copied += n
        if whole:
            values[i] = buf[to:to + n]
        else:
            values[i].append(buf[to:to + n])
    if not board.unchanged_at(slots):
        return None
    return Versioned(version, values), copied


def head_only(board: BoardReader, arena: memoryview, reads: Reads, head: Entry) -> tuple[Versioned, int]:
    """The version number alone (a wait that needs no bytes)."""
    return Versioned(head.version, None), 0


class CopyInto:
    """A copier straight from the arena into the reader's own arrays, for a reader that puts
    every version into the same memory (``kilorl.params.copy_in``): no buffer in between.

    The anchor must hold ``record`` (e.g. the commit record the runs were planned against);
    ``runs`` are ``(read index, offset in that value, destination uint8 array, destination
    offset, length)``. The slots are checked after the copy, as for every board read; a copy
    they refuse has written the destinations all the same, so a reader that gets None (or
    an error) must copy a whole version into them again before it uses them."""

    def __init__(self, record: bytes, runs: list[tuple[int, int, np.ndarray, int, int]]) -> None:
        self.record = record
        self.runs = runs
        self.extent: dict[int, int] = {}
        """Per read index: the bytes its value must have for every run to fit."""
        for i, at, _, _, n in runs:
            self.extent[i] = max(self.extent.get(i, 0), at + n)
        self.nbytes = sum(n for *_, n in runs)

    def __call__(self, board: BoardReader, arena: memoryview, reads: Reads, head: Entry) -> tuple[Versioned, int] | None:
        if not head.flags & RAW or head.size != len(self.record):
            return None
        if bytes(arena[head.offset:head.offset + head.size]) != self.record:
            return None  # another layout: the caller plans again
        version = head.version
        slots = [(board.position(reads[0][0]), head.seq)]
        offsets = [head.offset]
        for name, _ in reads[1:]:
            got = board.raw_entry(name)
            if got is None:
                return None
            at, seq, v, offset, size, flags = got
            if seq & 1 or v != version or size < self.extent.get(len(offsets), 0):
                return None
            slots.append((at, seq))
            offsets.append(offset)
        for i, at, dest, to, n in self.runs:
            dest[to:to + n] = np.frombuffer(arena, np.uint8, n, offsets[i] + at)
        if not board.unchanged_at(slots):
            return None
        return Versioned(version, None), self.nbytes
