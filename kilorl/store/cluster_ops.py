"""Request types of a cluster worker, added to the worker's op table by ``ClusterNode``.

Worker-to-worker ops (``c.*``): metadata records (``meta_put``, ``meta_copy``,
``meta_del``, ``locate``, ``has``, ``invalidate``), bytes (``fetch``: one chunk,
``push``: a whole object handed over on leave) and ``info`` for status. The client ops
``set``/``commit``/``get``/``mget``/``delete``/``exists``/``stats`` are wrapped so that
they act on the whole cluster. Records travel as msgpack payloads (never pickle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import KeyNotFound, ObjectLost, StoreError, WorkerLeaving
from kilorl.store.handlers import Reply, arg
from kilorl.store.meta_records import MetaRecord, merge, new_version, pack_records, unpack_records
from kilorl.store.objects import Region

if TYPE_CHECKING:
    from kilorl.store.node import ClusterNode
    from kilorl.store.worker import Connection, Worker

OpFn = Callable[["ClusterNode", dict[str, Any], Any], dict[str, Any]]


def _replicate(node: ClusterNode, key: str, rec: dict[str, Any] | None) -> None:
    """Pushes the owner's record to the other preference-list member (authoritative)."""
    if rec is None:
        return
    for member in node.preference(key):
        if member != node.id:
            try:
                node.call_member(member, {"op": "c.meta_copy", "auth": True},
                                 pack_records([MetaRecord.from_wire(rec)]))
            except StoreError:
                pass  # the next ring change re-sends records whose holders changed


def meta_put(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key = arg(h, "key", str)
    if node.leaving.is_set():
        raise WorkerLeaving(f"worker {node.id} is leaving; its records go to the next owner")
    pref = node.preference(key)
    if node.id not in pref and not h.get("fwd"):  # the sender's ring is older than ours
        return node.call_member(pref[0], {**h, "fwd": True})
    holder, size, meta, mode = arg(h, "holder", str), arg(h, "size", int), arg(h, "meta", dict), arg(h, "mode", str)
    tier = arg(h, "tier", str, "dram")
    handoff_ver = arg(h, "ver", int, None)
    invalid: list[str] = []
    prev_l2 = False
    with node.lock:
        rec = node.records.get(key)
        if handoff_ver is not None:
            if rec is not None and rec.ver > handoff_ver:
                return {"ver": rec.ver, "stale": True}
            if rec is not None and rec.ver == handoff_ver:
                rec.holder, rec.lost = holder, False
                rec.copies.setdefault(holder, 0)
            else:
                rec = MetaRecord(key, handoff_ver, holder, size, meta, mode, tier, {holder: 0})
        else:
            ver = new_version(max(rec.ver if rec else 0, node.floor.get(key, 0)))
            if rec is not None:
                invalid = [m for m in dict.fromkeys([rec.holder, *rec.copies]) if m and m != holder]
                prev_l2 = rec.durable
            rec = MetaRecord(key, ver, holder, size, meta, mode, tier, {holder: 0})
        node.records[key] = rec
        snapshot = rec.to_wire()
    _replicate(node, key, snapshot)
    for member in invalid:
        try:
            node.call_member(member, {"op": "c.invalidate", "key": key, "ver": rec.ver})
        except StoreError:
            pass  # a dead member's copies die with it
    return {"ver": rec.ver, "prev_l2": prev_l2}


def meta_copy(node: ClusterNode, h: dict[str, Any], payload: Any) -> dict[str, Any]:
    if node.leaving.is_set():
        raise WorkerLeaving(f"worker {node.id} is leaving; send records to the next owner")
    records = unpack_records(payload)
    auth = bool(h.get("auth"))
    with node.lock:
        for rec in records:
            node.records[rec.key] = merge(node.records.get(rec.key), rec, auth)
        node.counters["records_received"] += len(records)
    return {"n": len(records)}


def meta_del(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key = arg(h, "key", str)
    with node.lock:
        rec = node.records.pop(key, None)
        if rec is None:
            return {"found": False, "prev_l2": False}
        ver = new_version(rec.ver)
        node.floor[key] = ver
        members = [m for m in dict.fromkeys([rec.holder, *rec.copies]) if m]
    if not h.get("fwd"):
        for member in node.preference(key):
            if member != node.id:
                try:
                    node.call_member(member, {"op": "c.meta_del", "key": key, "fwd": True})
                except StoreError:
                    pass
        for member in members:
            try:
                node.call_member(member, {"op": "c.invalidate", "key": key, "ver": ver})
            except StoreError:
                pass
    return {"found": not rec.lost, "prev_l2": rec.durable}


def locate(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key, requester = arg(h, "key", str), arg(h, "requester", str, "")
    live = node.membership.view.members
    with node.lock:
        rec = node.records.get(key)
        if rec is None:
            return {"rec": None}
        if rec.lost or not requester:
            return {"rec": rec.to_wire(), "source": rec.holder}
        exclude = set(arg(h, "exclude", list, [])) | {m for m in [rec.holder, *rec.copies] if m and m not in live}
        source = rec.pick_source(requester, node.cfg.fanout, exclude)
        return {"rec": rec.to_wire(), "source": source}


def has(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key = arg(h, "key", str)
    ver = node.local_version(key)
    with node.w.store.lock:
        obj = node.w.store.objects.get(key)
        if obj is None or ver is None:
            return {"rec": None}
        rec = MetaRecord(key, ver, node.id, obj.size, obj.meta, obj.l2_mode or "none", obj.tier or "l2")
    return {"rec": rec.to_wire()}


def invalidate(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    node.invalidate(arg(h, "key", str), arg(h, "ver", int))
    return {}


def info(node: ClusterNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    out = node.info()
    s = node.w.store.stats()
    out["usage"] = {"objects": s["objects"], "dram_used": s["tiers"]["dram"]["used"],
                    "dram_capacity": s["tiers"]["dram"]["capacity"], "clients": len(node.w.connections)}
    return out


LOCAL_OPS: dict[str, OpFn] = {"c.meta_put": meta_put, "c.meta_copy": meta_copy, "c.meta_del": meta_del,
                              "c.locate": locate, "c.has": has, "c.invalidate": invalidate, "c.info": info}


def local_call(node: ClusterNode, header: dict[str, Any], payload: Any = None) -> dict[str, Any]:
    """Runs a ``c.*`` op on this worker without a socket (the key's owner is ourselves)."""
    return LOCAL_OPS[header["op"]](node, header, payload)


# -- handlers ------------------------------------------------------------------------------
def install(worker: Worker, node: ClusterNode) -> None:
    for name, fn in LOCAL_OPS.items():
        worker.register(name, _plain(node, fn))
    worker.register("c.fetch", lambda w, conn, h: _fetch(node, h))
    worker.register("c.push", lambda w, conn, h: _push(node, conn, h))
    orig = dict(worker.handlers)
    for name in ("set", "commit"):
        worker.register(name, _write(node, orig[name]))
    worker.register("get", _get(node, orig["get"]))
    worker.register("mget", _mget(node, orig["mget"]))
    worker.register("delete", _delete(node, orig["delete"]))
    worker.register("exists", _exists(node))
    worker.register("stats", _stats(node, orig["stats"]))


def _plain(node: ClusterNode, fn: OpFn):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        payload = conn.fs.read_payload() if conn.fs.pending_payload else None
        return Reply(fn(node, h, payload))
    return handler


def _fetch(node: ClusterNode, h: dict[str, Any]) -> Reply:
    from kilorl.store import transfer

    key, ver = arg(h, "key", str), arg(h, "ver", int)
    off, length = arg(h, "off", int), arg(h, "len", int)
    if off < 0 or length < 0:
        raise StoreError("off/len: must be >= 0")
    buffers, after = transfer.serve_chunk(node, key, ver, off, length)
    return Reply({}, buffers, after)


def _push(node: ClusterNode, conn: Connection, h: dict[str, Any]) -> Reply:
    key, ver, meta, mode = arg(h, "key", str), arg(h, "ver", int), arg(h, "meta", dict), arg(h, "mode", str)
    size = conn.fs.pending_payload
    store = node.w.store
    node.begin_write()  # refuses (WorkerLeaving) when this worker is leaving too
    try:
        data = store.stage(size)
        try:
            conn.fs.read_payload_into(store.view(data) if isinstance(data, Region) else memoryview(data))
        except BaseException:
            if isinstance(data, Region):
                store.release([data])
            raise
        node.keep_local(key, ver, meta, size, data, primary=True)
        resp = node.meta_call(key, {"op": "c.meta_put", "key": key, "holder": node.id, "size": size, "meta": meta,
                                    "mode": mode, "ver": ver})
        if resp.get("stale"):
            node.invalidate(key, resp["ver"])
        return Reply({"ver": resp["ver"]})
    finally:
        node.end_write()


def _user_key(h: dict[str, Any]) -> str | None:
    key = h.get("key")
    if isinstance(key, str) and key and not key.startswith("\x00") and h.get("ver") is None:
        return key
    return None


def _write(node: ClusterNode, orig):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        key = _user_key(h)
        if key is None:  # versioned objects (publish) stay on the worker they were published to
            return orig(w, conn, h)
        node.begin_write()
        try:
            reply = orig(w, conn, h)
            node.announce(key)
            return reply
        finally:
            node.end_write()
    return handler


def _get(node: ClusterNode, orig):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        key = _user_key(h)
        if key is None:
            return orig(w, conn, h)
        timeout = arg(h, "timeout", (int, float), None)
        for _ in range(3):
            node.ensure_local(key, timeout)
            try:
                return orig(w, conn, {**h, "timeout": None})
            except KeyNotFound:
                continue  # invalidated between the pull and the read: resolve again
        return orig(w, conn, {**h, "timeout": None})
    return handler


def _mget(node: ClusterNode, orig):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        for key in arg(h, "keys", list):
            if isinstance(key, str) and key and not key.startswith("\x00"):
                try:
                    node.ensure_local(key, None)
                except (KeyNotFound, ObjectLost):
                    pass
        return orig(w, conn, h)
    return handler


def _delete(node: ClusterNode, orig):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        keys = [k for k in arg(h, "keys", list) if isinstance(k, str) and k and not k.startswith("\x00")]
        present = set(k for k, ok in zip(keys, w.store.exists(keys)) if ok)
        orig(w, conn, h)
        n = 0
        for key in keys:
            resp = node.meta_call(key, {"op": "c.meta_del", "key": key})
            n += bool(resp["found"] or key in present)
            if resp.get("prev_l2") and w.store.l2 is not None:
                w.store.l2.delete(key)
        return Reply({"n": n})
    return handler


def _exists(node: ClusterNode):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        keys = [k for k in arg(h, "keys", list) if isinstance(k, str)]
        found = []
        for key, local in zip(keys, w.store.exists(keys)):
            if not local:
                located = node.lookup(key, set(), register=False)
                local = located is not None and not located.rec.lost
            found.append(local)
        return Reply({"found": found})
    return handler


def _stats(node: ClusterNode, orig):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        reply = orig(w, conn, h)
        reply.header["cluster"] = node.info()
        return reply
    return handler
