"""Read ops: ``get``, ``mget``, ``get_range``, ``describe``.

A read of a key the local store lacks first asks the router (``ensure_local``) to bring
it here; a byte range asks the router for just those bytes (``read_range``). Arena
bytes go to a same-host client as a lease on the region (zero copy), else inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound, ObjectLost
from kilorl.store.local.entries import ReadHandle
from kilorl.store.server.request import OpTable, Reply, arg, user_key
from kilorl.store.wire import codec

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


RANGE_META = {"k": "bytes"}


def check_range(key: str, size: int, offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise InvalidRequest(f"offset/length: must be >= 0, got offset={offset} length={length}")
    if offset + length > size:
        raise InvalidRequest(f"offset/length: [{offset}, {offset + length}) is outside {key!r} ({size} bytes)")


def read_reply(w: Worker, conn: Connection, handle: ReadHandle, zc: int | None,
               rng: tuple[int, int] | None = None) -> tuple[dict, list, list]:
    """(item header, payload buffers, regions to release after sending) for one read: the
    whole object, or the byte range ``rng`` = (offset, length) of it as plain bytes.

    Takes over the handle's region reference (a lease, or a release after sending)."""
    off, size = rng if rng is not None else (0, handle.size)
    item: dict[str, Any] = {"meta": handle.meta if rng is None else RANGE_META, "size": size, "tier": handle.tier}
    conn.bytes_read += size
    if handle.region is not None:
        if conn.same_host and zc is not None and size >= zc:
            lease = conn.next_id()
            conn.leases[lease] = handle.region
            item.update(loc=handle.region.offset + off, lease=lease)
            return item, [], []
        return item, [w.store.view(handle.region)[off:off + size]], [handle.region]
    if handle.tensor is not None:
        ipc = w.store.device.ipc_handle(handle.tensor) if conn.same_host and zc is not None and rng is None else None
        if ipc is not None:  # same node, CUDA: the reader maps the worker's tensor (untested here)
            item["cuda_ipc"] = ipc
            return item, [], []
        return item, [w.store.device.to_host(handle.tensor).cast("B")[off:off + size]], []
    return item, [handle.data[off:off + size]], []


class ReadBatch:
    """Items of one reply built read by read (``items``, like ``mget``): what has been
    added so far is undone by ``abort`` (a later read failed), else sent by ``reply``."""

    def __init__(self, w: Worker, conn: Connection, zc: int | None) -> None:
        self.w, self.conn, self.zc = w, conn, zc
        self.items: list[dict[str, Any]] = []
        self.bufs: list[Any] = []
        self.regions: list[Any] = []

    def add(self, handle: ReadHandle, rng: tuple[int, int] | None = None) -> None:
        """One item: the whole handle or its byte range (takes over the handle's reference)."""
        item, b, r = read_reply(self.w, self.conn, handle, self.zc, rng)
        self.items.append(item)
        self.bufs += b
        self.regions += r

    def add_ranges(self, key: str, handle: ReadHandle, ranges: list[tuple[int, int]]) -> None:
        """One item per byte range of ``handle`` (each range leased on its own)."""
        try:
            for off, length in ranges:
                check_range(key, handle.size, off, length)
        except BaseException:
            if handle.region is not None:
                self.w.store.release([handle.region])
            raise
        if not ranges and handle.region is not None:
            self.w.store.release([handle.region])
        for i, rng in enumerate(ranges):
            if handle.region is not None and i:
                self.w.store.retain(handle.region)  # one reference per range
            self.add(handle, rng)

    def abort(self) -> None:
        """Return every reference taken so far: leases handed out and regions to send."""
        leased = [self.conn.leases.pop(i["lease"]) for i in self.items if i.get("lease") in self.conn.leases]
        self.w.store.release(leased + self.regions)
        self.items, self.bufs, self.regions = [], [], []

    def reply(self, header: dict[str, Any] | None = None, single: bool = False) -> Reply:
        """The reply: ``items`` and ``header``; ``single``: the one item's fields in the header."""
        regions = self.regions
        fields = {**self.items[0]} if single else {"items": self.items}
        return Reply({**(header or {}), **fields}, self.bufs, (lambda: self.w.store.release(regions)) if regions else None)


def ranged_reply(w: Worker, conn: Connection, key: str, handle: ReadHandle, zc: int | None,
                 ranges: list[tuple[int, int]]) -> Reply:
    """Several byte ranges of one object in one reply (``items``, like ``mget``)."""
    batch = ReadBatch(w, conn, zc)
    batch.add_ranges(key, handle, ranges)
    return batch.reply()


def handles_reply(w: Worker, conn: Connection, handles: list[ReadHandle], zc: int | None) -> Reply:
    """Several whole handles (e.g. byte ranges pulled from a remote holder) in one reply."""
    batch = ReadBatch(w, conn, zc)
    for handle in handles:
        batch.add(handle)
    return batch.reply()


def single_read(w: Worker, conn: Connection, h: dict[str, Any], handle: ReadHandle) -> Reply:
    item, bufs, regions = read_reply(w, conn, handle, arg(h, "zc", int, None))
    return Reply(item, bufs, (lambda: w.store.release(regions)) if regions else None)


def acquire_routed(w: Worker, key: str, timeout: float | None) -> ReadHandle:
    """The local bytes of ``key``, first pulled from wherever the router finds them."""
    for attempt in range(3):
        waited = w.router.ensure_local(key, timeout)
        try:
            return w.store.acquire(key, None if waited else timeout)
        except KeyNotFound:
            if not waited or attempt == 2:
                raise  # else: invalidated between the pull and the read: resolve again
    raise AssertionError("unreachable")


@OPS.op("get")
def get(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    timeout = arg(h, "timeout", (int, float), None)
    return single_read(w, conn, h, acquire_routed(w, user_key(h), timeout))


@OPS.op("mget")
def mget(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = arg(h, "keys", list)
    zc = arg(h, "zc", int, None)
    if not all(isinstance(k, str) for k in keys):
        raise InvalidRequest("keys: every key must be a string")
    for k in keys:
        if k and not k.startswith("\x00"):
            try:
                w.router.ensure_local(k, None)
            except (KeyNotFound, ObjectLost):
                pass
    items, bufs, regions = [], [], []
    try:
        for k in keys:
            try:
                handle = w.store.acquire(k)
            except KeyNotFound:
                items.append(None)
                continue
            item, b, r = read_reply(w, conn, handle, zc)
            items.append(item)
            bufs += b
            regions += r
    except BaseException:
        w.store.release(regions)  # leases already handed out go with the connection
        raise
    return Reply({"items": items}, bufs, (lambda: w.store.release(regions)) if regions else None)


@OPS.op("get_range")
def get_range(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key, offset, length = user_key(h), arg(h, "offset", int), arg(h, "length", int)
    check_range(key, offset + length, offset, length)  # signs first; the size is checked below
    zc = arg(h, "zc", int, None)
    if not w.store.exists([key])[0]:
        remote = w.router.read_range(key, offset, length)  # only these bytes move, into our arena
        if remote is not None:
            return single_read(w, conn, h, remote)
    handle = w.store.acquire(key)
    try:
        check_range(key, handle.size, offset, length)
    except InvalidRequest:
        if handle.region is not None:
            w.store.release([handle.region])
        raise
    item, bufs, regions = read_reply(w, conn, handle, zc, (offset, length))
    return Reply(item, bufs, (lambda: w.store.release(regions)) if regions else None)


@OPS.op("describe")
def describe(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key = user_key(h)
    found = w.store.peek(key) or w.router.describe_remote(key)
    if found is None:
        raise KeyNotFound(f"key {key!r} not found")
    return Reply(codec.describe(*found))
