"""Request handlers of the worker, one function per op, registered in ``HANDLERS``.

A handler gets the worker, the connection and the request header; it reads the payload
itself when it needs one (straight into the arena for sets) and returns a ``Reply``.
The table is plain data so a multi-node layer can add ops with ``Worker.register``; it
never wraps these handlers: they call the worker's router (``router.py``) at fixed points.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound, ObjectLost, VersionGone
from kilorl.store.local.objects import ReadHandle, Region
from kilorl.store.local.versions import parse_version_key, version_key
from kilorl.store.server.request import Handler, Reply, arg

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

WRITE_MODES = {"none": None, "through": "through", "back": "back"}


HANDLERS: dict[str, Handler] = {}


def op(name: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn
    return deco


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


def _routed_write(w: Worker, key: str, write: Callable[[], Reply]) -> Reply:
    """A user-key write between the router's begin/end, announced when it succeeded."""
    if not key:  # a version of a published name: its own path
        return write()
    w.router.begin_write()
    try:
        reply = write()
        w.router.announce(key)
        return reply
    finally:
        w.router.end_write()


@op("set")
def set_(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key = _key(h) if h.get("ver") is None else ""

    def write() -> Reply:
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
    return _routed_write(w, key, write)


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

    def write() -> Reply:
        try:
            f = _write_fields(w, h)
        except BaseException:
            w.store.release([conn.allocs.pop(ticket)])
            raise
        region = conn.allocs.pop(ticket)
        return _finish_put(w, key, region.size, region, f)
    return _routed_write(w, key, write)


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


@op("get")
def get(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    timeout = arg(h, "timeout", (int, float), None)
    return _single_read(w, conn, h, acquire_routed(w, _key(h), timeout))


@op("mget")
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


@op("delete")
def delete(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = [k for k in arg(h, "keys", list) if isinstance(k, str) and k and not k.startswith("\x00")]
    present = {k for k, ok in zip(keys, w.store.exists(keys)) if ok}
    n, l2_keys = w.store.delete(keys)
    w.delete_l2(l2_keys)
    return Reply({"n": w.router.on_delete(keys, present, n)})


@op("exists")
def exists(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = [k for k in arg(h, "keys", list) if isinstance(k, str)]
    return Reply({"found": [here or w.router.exists_elsewhere(k) for k, here in zip(keys, w.store.exists(keys))]})


@op("expire")
def expire(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"found": w.keyspace.expire(_key(h), _ttl(h))})


@op("keys")
def keys(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    local = w.keyspace.keys(arg(h, "prefix", str, ""))
    return Reply({"keys": local if h.get("local_only") else w.router.list_keys(arg(h, "prefix", str, ""), local)})


@op("pin")
def pin(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    w.keyspace.pin(_key(h), bool(h.get("on", True)))
    return Reply()


@op("locate")
def locate(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(w.keyspace.locate(_key(h)))


@op("stats")
def stats(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    s = w.keyspace.stats()
    s.update(pid=w.pid, clients=len(w.connections), arena=str(w.arena.path), versions=w.versions.names(),
             streams=sorted(w.streams.streams), leases=sum(len(c.leases) for c in list(w.connections.values())))
    info = w.router.info()
    if info is not None:
        s["cluster"] = info
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
