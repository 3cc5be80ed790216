"""Key-space and service ops: delete, exists, expire, keys, version_list, pin, locate, stats, ping, shutdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.server.request import OpTable, Reply, arg, ttl_field, user_key

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


@OPS.op("delete")
def delete(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = [k for k in arg(h, "keys", list) if isinstance(k, str) and k and not k.startswith("\x00")]
    present = {k for k, ok in zip(keys, w.store.exists(keys)) if ok}
    n, l2_keys = w.store.delete(keys)
    w.delete_l2(l2_keys)
    return Reply({"n": w.router.on_delete(keys, present, n)})


@OPS.op("exists")
def exists(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    keys = [k for k in arg(h, "keys", list) if isinstance(k, str)]
    return Reply({"found": [here or w.router.exists_elsewhere(k) for k, here in zip(keys, w.store.exists(keys))]})


@OPS.op("expire")
def expire(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"found": w.keyspace.expire(user_key(h), ttl_field(h))})


@OPS.op("keys")
def keys(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    local = w.keyspace.keys(arg(h, "prefix", str, ""))
    return Reply({"keys": local if h.get("local_only") else w.router.list_keys(arg(h, "prefix", str, ""), local)})


@OPS.op("version_list")
def version_list(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """Versioned names starting with ``prefix`` whose versions this worker holds, each with its
    versions (oldest first) and their tier and size: what ``keys`` does not list.

    Read off the objects the worker holds (a version's bytes are an object under its hidden
    key), not off the version table: on a mesh the history lives on the name's ring owner,
    and a worker holds the versions published through it or pulled by its readers."""
    from kilorl.store.errors import KeyNotFound
    from kilorl.store.local.versions import HIDDEN, parse_version_key

    prefix = arg(h, "prefix", str, "")
    held: dict[str, list[tuple[int, str]]] = {}
    for key in w.keyspace.keys(HIDDEN + prefix, include_hidden=True):
        parsed = parse_version_key(key)
        if parsed is not None:
            held.setdefault(parsed[0], []).append((parsed[1], key))
    out: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(held):
        rows = []
        for v, key in sorted(held[name]):
            try:
                loc = w.keyspace.locate(key)
            except KeyNotFound:  # reclaimed since
                continue
            rows.append({"version": v, "tier": loc["tier"], "size": loc["size"]})
        if rows:
            out[name] = rows
    return Reply({"names": out})


@OPS.op("pin")
def pin(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    w.keyspace.pin(user_key(h), bool(h.get("on", True)))
    return Reply()


@OPS.op("locate")
def locate(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(w.keyspace.locate(user_key(h)))


@OPS.op("stats")
def stats(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    s = w.keyspace.stats()
    s.update(pid=w.pid, clients=len(w.connections), arena=str(w.arena.path), versions=w.versions.names(),
             streams=sorted(w.streams.streams), leases=sum(len(c.leases) for c in list(w.connections.values())))
    s["connection"] = {"id": conn.id, "bytes_read": conn.bytes_read}
    s["process"] = _process_memory()
    s["arena_populated"] = w.arena.populated.is_set()  # every page pre-faulted (wire/shm.py)
    s["board_held_bytes"] = w.board.held_bytes() if w.board is not None else 0
    info = w.router.info()
    if info is not None:
        s["cluster"] = info
    return Reply(s)


def _process_memory() -> dict[str, float]:
    """The worker process's resident memory and the node's available memory (what leak
    detection watches: a monitor elsewhere reads them here, without the worker's pid)."""
    import psutil

    return {"rss_bytes": float(psutil.Process().memory_info().rss),
            "host_available_bytes": float(psutil.virtual_memory().available)}


@OPS.op("ping")
def ping(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"pong": True})


@OPS.op("release")
def release(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply()  # the "rel" field of every request is handled by the dispatcher


@OPS.op("shutdown")
def shutdown(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"stopping": True}, after=w.request_stop)
