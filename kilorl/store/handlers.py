"""Request handlers of the worker, one function per op, registered in ``HANDLERS``.

A handler gets the worker, the connection and the request header; it reads the payload
itself when it needs one (straight into the arena for sets) and returns a ``Reply``.
The table is plain data so a multi-node layer can add ops with ``Worker.register``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound
from kilorl.store.objects import ReadHandle, Region
from kilorl.store.versioned import parse_version_key

if TYPE_CHECKING:
    from kilorl.store.worker import Connection, Worker

WRITE_MODES = {"none": None, "through": "through", "back": "back"}
_MISSING = object()


@dataclass
class Reply:
    """Response header, payload buffers, and a callback run after sending."""

    header: dict[str, Any] = field(default_factory=dict)
    buffers: list[Any] = field(default_factory=list)
    after: Callable[[], None] | None = None


Handler = Callable[["Worker", "Connection", dict[str, Any]], Reply]
HANDLERS: dict[str, Handler] = {}


def op(name: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn
    return deco


def arg(header: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = _MISSING) -> Any:
    """A validated request field; errors name the field."""
    value = header.get(name, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise InvalidRequest(f"{name}: required field missing")
        return default
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise InvalidRequest(f"{name}: expected {types}, got {type(value).__name__}")
    return value


def _key(header: dict[str, Any]) -> str:
    key = arg(header, "key", str)
    if not key or len(key) > 4096:
        raise InvalidRequest("key: must be a non-empty string of at most 4096 characters")
    if key.startswith("\x00"):
        raise InvalidRequest("key: keys starting with NUL are reserved (versioned objects)")
    return key


def _ttl(header: dict[str, Any]) -> float | None:
    ttl = arg(header, "ttl", (int, float), None)
    if ttl is not None and (not math.isfinite(ttl) or ttl <= 0):
        raise InvalidRequest(f"ttl: must be a positive number of seconds, got {ttl}")
    return ttl


def _write_fields(w: Worker, header: dict[str, Any]) -> dict[str, Any]:
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
        if not (isinstance(ver, list) and len(ver) == 2 and isinstance(ver[0], str) and isinstance(ver[1], int)):
            raise InvalidRequest("ver: must be [name, version]")
        w.versions.check_new(ver[0], ver[1])
    meta = arg(header, "meta", dict)
    return {"meta": meta, "mode": mode, "ttl": _ttl(header), "tier": tier, "pin": bool(header.get("pin")),
            "ver": ver}


def _finish_put(w: Worker, key: str, size: int, data: Region | bytearray, f: dict[str, Any]) -> Reply:
    if f["ver"] is not None:
        from kilorl.store.versioned import version_key

        key = version_key(*f["ver"])
    obj, old = w.store.put(key, f["meta"], size, data, tier=f["tier"], ttl=f["ttl"], l2_mode=f["mode"], pin=f["pin"])
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
    if f["ver"] is not None:
        reclaim = w.versions.add(*f["ver"])
        if reclaim:
            _, l2_keys = w.store.delete(reclaim)
            w.delete_l2(l2_keys)
    return Reply({"gen": obj.gen})


@op("set")
def set_(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key = _key(h) if h.get("ver") is None else ""
    f = _write_fields(w, h)
    size = conn.fs.pending_payload
    data = w.store.stage(size, f["tier"])
    try:
        conn.fs.read_payload_into(w.store.view(data) if isinstance(data, Region) else memoryview(data))
    except BaseException:
        if isinstance(data, Region):
            w.store.release([data])
        raise
    return _finish_put(w, key, size, data, f)


@op("alloc")
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


@op("commit")
def commit(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    ticket = arg(h, "ticket", int)
    key = _key(h) if h.get("ver") is None else ""
    if ticket not in conn.allocs:
        raise InvalidRequest(f"ticket: unknown allocation {ticket}")
    try:
        f = _write_fields(w, h)
    except BaseException:
        w.store.release([conn.allocs.pop(ticket)])
        raise
    region = conn.allocs.pop(ticket)
    return _finish_put(w, key, region.size, region, f)


@op("abort")
def abort(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    region = conn.allocs.pop(arg(h, "ticket", int), None)
    if region is not None:
        w.store.release([region])
    return Reply()


def read_reply(w: Worker, conn: Connection, handle: ReadHandle, zc: int | None) -> tuple[dict, list, list]:
    """(item header, payload buffers, regions to release after sending) for one read."""
    item: dict[str, Any] = {"meta": handle.meta, "size": handle.size, "tier": handle.tier}
    if handle.region is not None:
        if conn.same_host and zc is not None and handle.size >= zc:
            lease = conn.next_id()
            conn.leases[lease] = handle.region
            item.update(loc=handle.region.offset, lease=lease)
            return item, [], []
        return item, [w.store.view(handle.region)], [handle.region]
    if handle.tensor is not None:
        ipc = w.store.device.ipc_handle(handle.tensor) if conn.same_host and zc is not None else None
        if ipc is not None:  # same node, CUDA: the reader maps the worker's tensor (untested here)
            item["cuda_ipc"] = ipc
            return item, [], []
        return item, [w.store.device.to_host(handle.tensor)], []
    return item, [handle.data], []


def _single_read(w: Worker, conn: Connection, h: dict[str, Any], handle: ReadHandle) -> Reply:
    item, bufs, regions = read_reply(w, conn, handle, arg(h, "zc", int, None))
    return Reply(item, bufs, (lambda: w.store.release(regions)) if regions else None)


@op("get")
def get(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    timeout = arg(h, "timeout", (int, float), None)
    return _single_read(w, conn, h, w.store.acquire(_key(h), timeout))


@op("mget")
def mget(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = arg(h, "keys", list)
    zc = arg(h, "zc", int, None)
    if not all(isinstance(k, str) for k in keys):
        raise InvalidRequest("keys: every key must be a string")
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


@op("delete")
def delete(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = [k for k in arg(h, "keys", list) if isinstance(k, str) and not k.startswith("\x00")]
    n, l2_keys = w.store.delete(keys)
    w.delete_l2(l2_keys)
    return Reply({"n": n})


@op("exists")
def exists(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"found": w.store.exists([k for k in arg(h, "keys", list) if isinstance(k, str)])})


@op("expire")
def expire(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"found": w.store.expire(_key(h), _ttl(h))})


@op("keys")
def keys(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"keys": w.store.keys(arg(h, "prefix", str, ""))})


@op("pin")
def pin(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    w.store.pin(_key(h), bool(h.get("on", True)))
    return Reply()


@op("locate")
def locate(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(w.store.locate(_key(h)))


@op("stats")
def stats(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    s = w.store.stats()
    s.update(pid=w.pid, clients=len(w.connections), arena=str(w.arena.path), versions=w.versions.names(),
             streams=sorted(w.streams.streams), leases=sum(len(c.leases) for c in list(w.connections.values())))
    return Reply(s)


@op("ping")
def ping(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"pong": True})


@op("release")
def release(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply()  # the "rel" field of every request is handled by the dispatcher


@op("shutdown")
def shutdown(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"stopping": True}, after=w.request_stop)


# -- versioned objects -------------------------------------------------------------------
@op("latest_version")
def latest_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"version": w.versions.latest(arg(h, "name", str))})


@op("get_version")
def get_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    name = arg(h, "name", str)
    version = arg(h, "version", int, None)
    for _ in range(8):  # the latest may be reclaimed between resolve and acquire: retry
        key = w.versions.resolve(name, version)
        try:
            handle = w.store.acquire(key)
        except KeyNotFound:
            if version is not None:
                from kilorl.store.errors import VersionGone

                raise VersionGone(f"{name!r} version {version} was reclaimed") from None
            continue
        reply = _single_read(w, conn, h, handle)
        reply.header["version"] = parse_version_key(key)[1]
        return reply
    raise KeyNotFound(f"{name!r}: could not read a stable latest version")


@op("wait_version")
def wait_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    v = w.versions.wait(arg(h, "name", str), arg(h, "min_version", int), arg(h, "timeout", (int, float), None))
    return Reply({"version": v})


# -- streams -----------------------------------------------------------------------------
@op("xsend")
def xsend(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    stream, meta = arg(h, "stream", str), arg(h, "meta", dict)
    timeout, capacity = arg(h, "timeout", (int, float), None), arg(h, "capacity", int, None)
    payload = bytes(conn.fs.read_payload())
    return Reply({"id": w.streams.send(stream, meta, payload, timeout, capacity)})


@op("xrecv")
def xrecv(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    msg = w.streams.receive(arg(h, "stream", str), arg(h, "group", str), conn.id,
                            arg(h, "timeout", (int, float), None))
    if msg is None:
        return Reply({"id": None})
    return Reply({"id": msg.id, "meta": msg.meta, "deliveries": msg.deliveries}, [msg.payload])


@op("xack")
def xack(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    ids = [i for i in arg(h, "ids", list) if isinstance(i, int)]
    return Reply({"n": w.streams.ack(arg(h, "stream", str), arg(h, "group", str), ids)})


@op("xinfo")
def xinfo(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(w.streams.info(arg(h, "stream", str)))
