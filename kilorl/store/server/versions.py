"""Versioned-object ops: ``latest_version``, ``get_version``, ``wait_version`` (publish is a write)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import KeyNotFound, VersionGone
from kilorl.store.local.versions import parse_version_key
from kilorl.store.server.reads import single_read
from kilorl.store.server.request import OpTable, Reply, arg

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


@OPS.op("latest_version")
def latest_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"version": w.versions.latest(arg(h, "name", str))})


@OPS.op("get_version")
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
        reply = single_read(w, conn, h, handle)
        reply.header["version"] = parse_version_key(key)[1]
        return reply
    raise KeyNotFound(f"{name!r}: could not read a stable latest version")


@OPS.op("wait_version")
def wait_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    v = w.versions.wait(arg(h, "name", str), arg(h, "min_version", int), arg(h, "timeout", (int, float), None))
    return Reply({"version": v})
