"""Write ops: ``set`` (payload over the socket), ``publish`` (versions of several names in
one request), ``alloc``/``commit``/``abort`` (local clients write into the arena themselves).
User-key writes run between the router's begin/end hooks and are announced to it once
stored; versions of a published name take their own path.

``nx`` (set-if-absent) is decided under the object table's lock on this worker, then by the
router (on a mesh: the key's ring owner, whose record decides) before the value is made
durable in L2; a loser's bytes are dropped and the reply says ``stored: False``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyExists
from kilorl.store.local.entries import Region
from kilorl.store.local.versions import version_key
from kilorl.store.server.request import OpTable, Reply, arg, ttl_field, user_key

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()
WRITE_MODES = {"none": None, "through": "through", "back": "back"}


def write_fields(w: Worker, header: dict[str, Any]) -> dict[str, Any]:
    mode_name = arg(header, "mode", str, "none")
    if mode_name not in WRITE_MODES:
        raise InvalidRequest(f"mode: must be one of {sorted(WRITE_MODES)}, got {mode_name!r}")
    mode = WRITE_MODES[mode_name]
    if mode and w.store.l2 is None:
        raise InvalidRequest(f"mode: {mode_name!r} needs an L2 directory but this worker has none "
                             "(start it with --l2-dir); refusing to downgrade silently")
    tier = arg(header, "tier", str, None)
    w.store.check_tier(tier)
    ver = header.get("ver")
    if ver is not None:
        ver = version_field(w, ver, "ver")
    nx = arg(header, "nx", bool, False)
    if nx and ver is not None:
        raise InvalidRequest("nx: set-if-absent applies to keys, not to versions of a published name")
    meta = arg(header, "meta", dict)
    return {"meta": meta, "mode": mode, "ttl": ttl_field(header), "tier": tier, "pin": bool(header.get("pin")),
            "ver": ver, "nx": nx}


def version_field(w: Worker, ver: Any, field: str) -> list[Any]:
    """``[name, version or None]`` checked, with the version a publish of it will use."""
    if not (isinstance(ver, list) and len(ver) == 2 and isinstance(ver[0], str) and ver[0]
            and (ver[1] is None or (isinstance(ver[1], int) and not isinstance(ver[1], bool)))):
        raise InvalidRequest(f"{field}: must be [name, version or None]")
    if ver[1] is not None and ver[1] < 0:
        raise InvalidRequest(f"version: must be a non-negative int, got {ver[1]!r}")
    return [ver[0], w.version_book().reserve(ver[0], ver[1])]


def finish_put(w: Worker, key: str, size: int, data: Region | bytearray, f: dict[str, Any]) -> Reply:
    """Stores ``data`` (owned from here on) under ``key`` with the fields of ``write_fields``."""
    if f["ver"] is not None:
        key = version_key(*f["ver"])
    try:
        obj, old = w.store.put(key, f["meta"], size, data, tier=f["tier"], ttl=f["ttl"], l2_mode=f["mode"],
                               pin=f["pin"], if_absent=f.get("nx", False))
    except KeyExists:
        return Reply({"stored": False})
    if f.get("nx") and not w.router.announce(key, if_absent=True):  # another worker's value came first
        w.store.delete_generation(key, obj.gen)
        return Reply({"stored": False})
    l2 = w.store.l2
    if old is not None and old.l2_mode and not f["mode"]:
        w.delete_l2([(key, old.l2_mode)])
    if f["mode"] == "through":
        src, region = w.store.l2_source(obj)
        try:
            loc = l2.write(key, obj.meta, size, obj.expires_at, src)
        finally:
            del src
            if region is not None:
                w.store.release([region])
        w.store.mark_durable(key, obj.gen, loc)
    elif f["mode"] == "back":
        src, region = w.store.l2_source(obj)

        def done(loc, key=key, gen=obj.gen, region=region) -> None:
            if region is not None:
                w.store.release([region])
            if loc is not None:
                w.store.mark_durable(key, gen, loc)

        l2.enqueue_write(key, obj.gen, obj.meta, size, obj.expires_at, src, done)
    if f["ver"] is None:
        return Reply({"gen": obj.gen, "stored": True})
    try:
        reclaim = w.version_book().commit(f["ver"][0], f["ver"][1], key)
    except BaseException:
        w.store.delete_generation(key, obj.gen)
        raise
    book = w.version_book()
    if w.board is not None:  # readers waiting on the board wake now; reclaiming can follow
        w.board.committed(f["ver"][0], f["ver"][1], key, obj, book is w.local_book)
    if reclaim:  # a region the board names is cleared from it before it is freed (on_release)
        _, l2_keys = w.store.delete(reclaim)
        w.delete_l2(l2_keys)
    return Reply({"gen": obj.gen, "version": f["ver"][1]})


def staged_read(w: Worker, conn: Connection, size: int, tier: str | None) -> Region | bytearray:
    """The next ``size`` bytes of the request's payload, read into room staged for them
    (given back to the store if the read fails)."""
    data = w.store.stage(size, tier)
    try:
        conn.fs.read_payload_part(w.store.view(data) if isinstance(data, Region) else memoryview(data))
    except BaseException:
        if isinstance(data, Region):
            w.store.release([data])
        raise
    return data


def routed_write(w: Worker, key: str, write: Callable[[], Reply], announced: bool = False) -> Reply:
    """A user-key write between the router's begin/end, announced when it stored the value
    (``announced``: a set-if-absent, which ``finish_put`` announced already)."""
    if not key:  # a version of a published name: its own path
        return write()
    w.router.begin_write()
    try:
        reply = write()
        if reply.header.get("stored") and not announced:
            w.router.announce(key)
        return reply
    finally:
        w.router.end_write()


@OPS.op("set")
def set_(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key = user_key(h) if h.get("ver") is None else ""

    def write() -> Reply:
        f = write_fields(w, h)
        size = conn.fs.pending_payload
        return finish_put(w, key, size, staged_read(w, conn, size, f["tier"]), f)
    return routed_write(w, key, write, announced=h.get("nx") is True)


@OPS.op("alloc")
def alloc(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    if not conn.same_host:
        raise InvalidRequest("alloc: only clients on the worker's host can write into the arena")
    size = arg(h, "size", int)
    if size < 0 or size > w.rc.max_payload:
        raise InvalidRequest(f"size: must be in [0, {w.rc.max_payload}], got {size}")
    region = w.store.stage(size)
    ticket = conn.next_id()
    conn.allocs[ticket] = region
    return Reply({"offset": region.offset, "ticket": ticket})


@OPS.op("commit")
def commit(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    ticket = arg(h, "ticket", int)
    key = user_key(h) if h.get("ver") is None else ""
    if ticket not in conn.allocs:
        raise InvalidRequest(f"ticket: unknown allocation {ticket}")

    def write() -> Reply:
        try:
            f = write_fields(w, h)
        except BaseException:
            w.store.release([conn.allocs.pop(ticket)])
            raise
        region = conn.allocs.pop(ticket)
        return finish_put(w, key, region.size, region, f)
    return routed_write(w, key, write, announced=h.get("nx") is True)


@OPS.op("abort")
def abort(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    region = conn.allocs.pop(arg(h, "ticket", int), None)
    if region is not None:
        w.store.release([region])
    return Reply()


@OPS.op("publish")
def publish(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """Versions of several published names in one request: ``items`` = [[name, version or
    None, meta, size], ...], their values end to end in the payload. Stored in order; the
    first failure stops the rest (its error is the reply), so what is published is always a
    prefix of the items, as for a pipelined batch of ``set`` requests, for one frame's cost."""
    items = arg(h, "items", list)
    if not items or len(items) > 4096:
        raise InvalidRequest(f"items: must list 1 to 4096 [name, version, meta, size], got {len(items)}")
    for i, item in enumerate(items):
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[2], dict)
                and isinstance(item[3], int) and not isinstance(item[3], bool) and item[3] >= 0):
            raise InvalidRequest(f"items[{i}]: must be [name, version or None, meta, size], got {item!r}")
    if sum(item[3] for item in items) != conn.fs.pending_payload:
        raise InvalidRequest(f"items: sizes add up to {sum(item[3] for item in items)} bytes, "
                             f"the payload has {conn.fs.pending_payload}")
    common = write_fields(w, {**{k: v for k, v in h.items() if k != "ver"}, "meta": {}})
    if common["nx"]:
        raise InvalidRequest("nx: set-if-absent applies to keys, not to versions of a published name")
    versions = []
    for i, (name, version, meta, size) in enumerate(items):
        f = {**common, "meta": meta, "ver": version_field(w, [name, version], f"items[{i}]")}
        versions.append(finish_put(w, "", size, staged_read(w, conn, size, f["tier"]), f).header["version"])
    return Reply({"versions": versions})
