"""Worker-to-worker request types (``c.*``), added to the worker's op table by ``MeshNode``.

Metadata records (``meta_put``, ``meta_copy``, ``meta_del``, ``locate``, ``has``,
``invalidate``), bytes (``fetch``: one chunk, ``push``: a whole object handed over on
leave) and ``info`` for status. The client ops are not touched: they reach the mesh
through the worker's router (``MeshNode``). Records travel as msgpack (never pickle).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import StoreError, WorkerLeaving
from kilorl.store.local.entries import Region
from kilorl.store.mesh import transfer
from kilorl.store.mesh.records import MetaRecord, merge, new_version, pack_records, unpack_records
from kilorl.store.server.request import Reply, arg

if TYPE_CHECKING:
    from kilorl.store.mesh.node import MeshNode
    from kilorl.store.server.worker import Connection, Worker

OpFn = Callable[["MeshNode", dict[str, Any], Any], dict[str, Any]]


def replicate(node: MeshNode, key: str, rec: dict[str, Any] | None) -> None:
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


def meta_put(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
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
        elif h.get("nx") and rec is not None and not rec.lost:  # set-if-absent: the owner's record decides
            return {"ver": rec.ver, "exists": True}
        else:
            ver = new_version(max(rec.ver if rec else 0, node.copies.floor.get(key, 0)))
            if rec is not None:
                invalid = [m for m in dict.fromkeys([rec.holder, *rec.copies]) if m and m != holder]
                prev_l2 = rec.durable
            rec = MetaRecord(key, ver, holder, size, meta, mode, tier, {holder: 0})
        node.records[key] = rec
        snapshot = rec.to_wire()
    replicate(node, key, snapshot)
    for member in invalid:
        try:
            node.call_member(member, {"op": "c.invalidate", "key": key, "ver": rec.ver})
        except StoreError:
            pass  # a dead member's copies die with it
    return {"ver": rec.ver, "prev_l2": prev_l2}


def meta_copy(node: MeshNode, h: dict[str, Any], payload: Any) -> dict[str, Any]:
    if node.leaving.is_set():
        raise WorkerLeaving(f"worker {node.id} is leaving; send records to the next owner")
    records = unpack_records(payload)
    auth = bool(h.get("auth"))
    with node.lock:
        for rec in records:
            node.records[rec.key] = merge(node.records.get(rec.key), rec, auth)
        node.counters["records_received"] += len(records)
    return {"n": len(records)}


def meta_del(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key = arg(h, "key", str)
    with node.lock:
        rec = node.records.pop(key, None)
        if rec is None:
            return {"found": False, "prev_l2": False}
        ver = new_version(rec.ver)
        node.copies.floor[key] = ver
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


def locate(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
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


def has(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    key = arg(h, "key", str)
    ver = node.copies.version(key)
    with node.w.store.lock:
        obj = node.w.store.objects.get(key)
        if obj is None or ver is None:
            return {"rec": None}
        rec = MetaRecord(key, ver, node.id, obj.size, obj.meta, obj.l2_mode or "none", obj.tier or "l2")
    return {"rec": rec.to_wire()}


def invalidate(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    node.invalidate(arg(h, "key", str), arg(h, "ver", int))
    return {}


def info(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    out = node.info()
    s = node.w.keyspace.stats()
    out["usage"] = {"objects": s["objects"], "dram_used": s["tiers"]["dram"]["used"],
                    "dram_capacity": s["tiers"]["dram"]["capacity"], "clients": len(node.w.connections)}
    return out


def adopt(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    """The holder of ``key`` died: if this worker has a full copy at ``ver``, it becomes the holder."""
    key, ver = arg(h, "key", str), arg(h, "ver", int)
    if not node.copies.promote(key, ver):
        return {"adopted": False}
    found = node.store.peek(key)
    if found is None:
        return {"adopted": False}
    meta, size = found
    resp = node.meta_call(key, {"op": "c.meta_put", "key": key, "holder": node.id, "size": size, "meta": meta,
                                "mode": "none", "ver": ver})
    return {"adopted": not resp.get("stale")}


def keys(node: MeshNode, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
    """User keys this worker knows: records it owns (not lost) and objects it holds."""
    prefix = arg(h, "prefix", str, "")
    with node.lock:
        owned = {k for k, r in node.records.items() if k.startswith(prefix) and not k.startswith("\x00") and not r.lost}
    return {"keys": sorted(owned | set(node.w.keyspace.keys(prefix)))}


LOCAL_OPS: dict[str, OpFn] = {"c.adopt": adopt, "c.keys": keys,
                              "c.meta_put": meta_put, "c.meta_copy": meta_copy, "c.meta_del": meta_del,
                              "c.locate": locate, "c.has": has, "c.invalidate": invalidate, "c.info": info}


# -- handlers ------------------------------------------------------------------------------
def register(worker: Worker, node: MeshNode) -> None:
    """Adds the ``c.*`` ops to ``worker`` (new op names only: nothing is wrapped)."""
    for name, fn in LOCAL_OPS.items():
        worker.register(name, _plain(node, fn))
        node.links.local_ops[name] = functools.partial(fn, node)
    worker.register("c.fetch", lambda w, conn, h: _fetch(node, h))
    worker.register("c.push", lambda w, conn, h: _push(node, conn, h))


def _plain(node: MeshNode, fn: OpFn):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        payload = conn.fs.read_payload() if conn.fs.pending_payload else None
        return Reply(fn(node, h, payload))
    return handler


def _fetch(node: MeshNode, h: dict[str, Any]) -> Reply:
    key, ver = arg(h, "key", str), arg(h, "ver", int)
    off, length = arg(h, "off", int), arg(h, "len", int)
    if off < 0 or length < 0:
        raise StoreError("off/len: must be >= 0")
    buffers, after = transfer.serve_chunk(node.copies, key, ver, off, length, node.cfg.get_timeout)
    return Reply({}, buffers, after)


def _push(node: MeshNode, conn: Connection, h: dict[str, Any]) -> Reply:
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
