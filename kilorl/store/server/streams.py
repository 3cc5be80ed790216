"""Stream ops: ``xsend``, ``xrecv``, ``xack``, ``xinfo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.server.request import OpTable, Reply, arg

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


@OPS.op("xsend")
def xsend(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    stream, meta = arg(h, "stream", str), arg(h, "meta", dict)
    timeout, capacity = arg(h, "timeout", (int, float), None), arg(h, "capacity", int, None)
    payload = bytes(conn.fs.read_payload())
    return Reply({"id": w.streams.send(stream, meta, payload, timeout, capacity)})


@OPS.op("xrecv")
def xrecv(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    msg = w.streams.receive(arg(h, "stream", str), arg(h, "group", str), conn.id,
                            arg(h, "timeout", (int, float), None))
    if msg is None:
        return Reply({"id": None})
    return Reply({"id": msg.id, "meta": msg.meta, "deliveries": msg.deliveries}, [msg.payload])


@OPS.op("xack")
def xack(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    ids = [i for i in arg(h, "ids", list) if isinstance(i, int)]
    return Reply({"n": w.streams.ack(arg(h, "stream", str), arg(h, "group", str), ids)})


@OPS.op("xinfo")
def xinfo(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(w.streams.info(arg(h, "stream", str)))
