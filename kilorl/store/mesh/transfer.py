"""Moving object bytes between workers: chunked pulls into the arena, relays, L2 loads.

``pull`` allocates the object in the local arena and asks the source for fixed-size
chunks, keeping ``WINDOW`` requests in flight on one connection; each reply is received
with ``recv_into`` straight into its arena slice (no Python ``bytes`` of the object).
While a pull runs it is an ``Inflight``: local readers of the same key wait for it
instead of pulling again, and peers told to relay from this worker are served each
chunk as soon as it has arrived (pipelined relay, so the source sends few copies).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kilorl.store.errors import StaleCopy, StoreError
from kilorl.store.local.entries import Region
from kilorl.store.local.l2 import L2Store
from kilorl.store.local.objects import ObjectStore
from kilorl.store.mesh.copies import LocalCopies
from kilorl.store.wire.peers import PeerPool

WINDOW = 4


@dataclass(eq=False)
class Inflight:
    """A pull in progress: how many leading bytes have arrived, and whether it failed."""

    ver: int
    size: int
    region: Region | None
    view: memoryview
    done: int = 0
    failed: bool = False
    finished: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)

    def advance(self, upto: int) -> None:
        with self.cond:
            self.done = upto
            self.cond.notify_all()

    def end(self, ok: bool) -> None:
        with self.cond:
            self.failed = not ok
            self.finished = True
            self.cond.notify_all()

    def wait_for(self, upto: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.done < upto and not self.failed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return not self.failed


def pull(copies: LocalCopies, pool: PeerPool, chunk: int, key: str, ver: int, size: int, meta: dict[str, Any],
         source: str) -> None:
    """Copies ``key`` at ``ver`` from the worker at ``source`` into this one (as a replica)."""
    store = copies.store
    data = store.stage(size)
    view = store.view(data) if isinstance(data, Region) else memoryview(data)
    infl = Inflight(ver, size, data if isinstance(data, Region) else None, view)
    with copies.lock:
        if key in copies.inflight:  # someone else started meanwhile: let them finish
            if isinstance(data, Region):
                store.release([data])
            raise StaleCopy(f"{key!r} is already being fetched")
        copies.inflight[key] = infl
    ok = False
    try:
        fetch_range(pool, source, key, ver, 0, view, chunk, infl.advance)
        copies.keep(key, ver, meta, size, data)
        ok = True
    except BaseException:
        if isinstance(data, Region):
            store.release([data])
        raise
    finally:
        infl.end(ok)
        with copies.lock:
            if copies.inflight.get(key) is infl:
                del copies.inflight[key]


def fetch_range(pool: PeerPool, source: str, key: str, ver: int, offset: int, into: memoryview, chunk: int,
                progress: Any = None) -> None:
    """Fills ``into`` with the bytes of ``key`` at ``ver`` from ``offset`` on, asked of the
    worker at ``source`` in ``chunk``-sized requests, ``WINDOW`` of them in flight."""
    size = len(into)
    if not size:
        return
    offsets = list(range(0, size, chunk))
    with pool.conn(source) as c:
        sent = 0
        for i, off in enumerate(offsets):
            while sent < len(offsets) and sent < i + WINDOW:
                o = offsets[sent]
                c.send({"op": "c.fetch", "key": key, "ver": ver, "off": offset + o, "len": min(chunk, size - o)})
                sent += 1
            end = min(off + chunk, size)
            c.recv(into[off:end])
            if progress is not None:
                progress(end)


def read_l2_range(store: ObjectStore, key: str, offset: int, into: memoryview) -> bool:
    """Reads bytes of ``key`` from its file in the shared L2 directory; False if none."""
    if store.l2 is None:
        return False
    path = store.l2.path_of(key)
    try:
        with open(path, "rb", buffering=0) as f:
            try:
                h, data_offset = L2Store.read_header(f)
            except ValueError:
                raise StoreError(f"L2 file of {key!r} is corrupt (bad magic)") from None
        if h.get("key") != key:
            return False
        L2Store.read_into(str(path), data_offset + offset, into)
    except FileNotFoundError:
        return False
    return True


def serve_chunk(copies: LocalCopies, key: str, ver: int, off: int, length: int,
                timeout: float) -> tuple[list, Any]:
    """(buffers, after) of one chunk: from a finished copy, or from a pull still in flight."""
    store = copies.store
    # A relay may be asked before its own pull has started: give it a moment to begin.
    deadline = time.monotonic() + 2.0
    while True:
        with copies.lock:
            infl = copies.inflight.get(key)
        if infl is not None or copies.version(key) == ver or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    if infl is not None and infl.ver == ver:
        if off + length > infl.size:
            raise StaleCopy(f"chunk [{off}, {off + length}) is outside {key!r} ({infl.size} bytes)")
        if not infl.wait_for(off + length, timeout=timeout):
            raise StaleCopy(f"relay copy of {key!r} failed or stalled")
        if infl.region is not None:
            with store.lock:
                infl.region.refs += 1
            copies.count_served(length)
            return [infl.view[off:off + length]], (lambda: store.release([infl.region]))
        copies.count_served(length)
        return [bytes(infl.view[off:off + length])], None
    copy = copies.get(key)
    if copy is None or copy.ver != ver:
        raise StaleCopy(f"this worker holds no copy of {key!r} at version {ver}")
    with store.lock:  # a copy in a file (disk tier, L2 only): read just this chunk's range
        obj = store.objects.get(key)
        src = None
        if obj is not None and obj.gen == copy.gen and obj.tier in ("disk", None) and off + length <= obj.size:
            src = (obj.disk_path, 0) if obj.tier == "disk" else (obj.l2_path, obj.l2_offset)
    if src is not None and src[0]:
        chunk = bytearray(length)
        try:
            L2Store.read_into(src[0], src[1] + off, memoryview(chunk))
            copies.count_served(length)
            return [chunk], None
        except OSError:
            pass  # moved meanwhile (promoted, demoted, replaced): read it the general way
    handle = store.acquire(key)
    if store.generation(key) != copy.gen or handle.size < off + length:
        if handle.region is not None:
            store.release([handle.region])
        raise StaleCopy(f"copy of {key!r} changed size")
    copies.count_served(length)
    if handle.region is not None:
        return [store.view(handle.region)[off:off + length]], (lambda: store.release([handle.region]))
    src = handle.data if handle.data is not None else memoryview(store.device.to_host(handle.tensor)).cast("B")
    return [src[off:off + length]], None


def l2_exists(store: ObjectStore, key: str) -> bool:
    return store.l2 is not None and store.l2.path_of(key).exists()


def load_from_l2(copies: LocalCopies, key: str, ver: int) -> bool:
    """Reads ``key`` from the shared L2 directory into this worker (any worker may: the
    directory is shared and every file names its key). False if there is no such file."""
    store = copies.store
    if store.l2 is None:
        return False
    path = store.l2.path_of(key)
    try:
        with open(path, "rb", buffering=0) as f:
            try:
                h, _ = L2Store.read_header(f)
            except ValueError:
                raise StoreError(f"L2 file of {key!r} is corrupt (bad magic)") from None
            if h.get("key") != key:
                return False
            size = int(h["size"])
            data = store.stage(size)
            view = store.view(data) if isinstance(data, Region) else memoryview(data)
            try:
                if f.readinto(view) != size:
                    raise StoreError(f"L2 file of {key!r} is short")
            except BaseException:
                if isinstance(data, Region):
                    store.release([data])
                raise
    except FileNotFoundError:
        return False
    copies.keep(key, ver, h["meta"], size, data)
    return True
