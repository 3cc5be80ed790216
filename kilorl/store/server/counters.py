"""``incr``: an atomic counter, read-modify-write on the worker that decides for the key.

A counter is a plain key holding a decimal integer as bytes (``get`` returns ``b"42"``; a
missing key counts as 0). The router sends the op to the key's ring owner on a mesh
(``Router.forward_atomic``); there every ``incr`` of the worker runs under one lock, so
concurrent increments from any number of clients sum exactly. A plain ``set`` of the same
key is not ordered with them (last writer wins), as in any KV store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound
from kilorl.store.local.entries import ReadHandle
from kilorl.store.server.reads import acquire_routed
from kilorl.store.server.request import OpTable, Reply, arg, user_key
from kilorl.store.server.writes import finish_put, routed_write
from kilorl.store.wire import codec

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()
def _handle_bytes(w: Worker, handle: ReadHandle) -> bytes:
    try:
        if handle.region is not None:
            return bytes(w.store.view(handle.region))
        if handle.tensor is not None:
            return bytes(w.store.device.to_host(handle.tensor))
        return bytes(handle.data) if handle.data is not None else b""
    finally:
        if handle.region is not None:
            w.store.release([handle.region])


def read_counter(w: Worker, key: str) -> int:
    """The integer ``key`` holds (0 if absent); a value that is not one is an error naming the key."""
    try:
        handle = acquire_routed(w, key, None)
    except KeyNotFound:
        return 0
    meta = handle.meta
    value = codec.decode(meta, memoryview(_handle_bytes(w, handle)))
    try:
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode("ascii")
        if isinstance(value, str):
            return int(value.strip())
    except (UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest(f"key: {key!r} holds a value that is not a decimal integer counter")


@OPS.op("incr")
def incr(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    key, delta = user_key(h), arg(h, "delta", int)
    forwarded = w.router.forward_atomic(key, {k: v for k, v in h.items() if k != "rel"})
    if forwarded is not None:
        return Reply({"value": forwarded["value"]})
    with w.rmw_lock:
        value = read_counter(w, key) + delta
        enc = codec.encode(str(value).encode())
        fields = {"meta": enc.meta, "mode": None, "ttl": None, "tier": None, "pin": False, "ver": None, "nx": False}

        def write() -> Reply:
            data = w.store.stage(enc.nbytes)
            target = w.store.view(data) if not isinstance(data, bytearray) else memoryview(data)
            enc.write_into(target)
            return finish_put(w, key, enc.nbytes, data, fields)
        routed_write(w, key, write)
    return Reply({"value": value})
