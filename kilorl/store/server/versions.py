"""Versioned-object ops: ``latest_version``, ``get_version``, ``wait_version`` (publish is a write)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound, VersionGone
from kilorl.store.local.versions import version_key
from kilorl.store.server.reads import handles_reply, ranged_reply, read_reply
from kilorl.store.server.request import OpTable, Reply, arg
from kilorl.store.server.version_book import VersionBook

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


@OPS.op("latest_version")
def latest_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"version": w.version_book().latest(arg(h, "name", str))})


def _ranges(h: dict[str, Any]) -> list[tuple[int, int]] | None:
    raw = arg(h, "ranges", list, None)
    if raw is None:
        return None
    out = []
    for i, r in enumerate(raw):
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)):
            raise InvalidRequest(f"ranges[{i}]: must be [offset, length], got {r!r}")
        out.append((r[0], r[1]))
    return out


@OPS.op("get_version")
def get_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    name = arg(h, "name", str)
    version = arg(h, "version", int, None)
    ranges = _ranges(h)
    zc = arg(h, "zc", int, None)
    book = w.version_book()
    for _ in range(8):  # the latest may be reclaimed between resolve and acquire: retry
        v = book.resolve(name, version)
        key = version_key(name, v)
        try:
            reply = _read_version(w, conn, book, key, zc, ranges)
        except KeyNotFound:
            if version is not None:
                raise VersionGone(f"{name!r} version {version} was reclaimed") from None
            continue
        reply.header["version"] = v
        return reply
    raise KeyNotFound(f"{name!r}: could not read a stable latest version")


def _read_version(w: Worker, conn: Connection, book: VersionBook, key: str, zc: int | None,
                  ranges: list[tuple[int, int]] | None) -> Reply:
    """One version (hidden ``key``): whole, or just ``ranges`` of it (pulled alone if remote)."""
    if not w.store.exists([key])[0]:
        if ranges is not None:
            remote = book.fetch_ranges(key, ranges)
            if remote is not None:
                return handles_reply(w, conn, remote, zc)
        else:
            book.make_local(key)
    handle = w.store.acquire(key)
    if ranges is None:
        item, bufs, regions = read_reply(w, conn, handle, zc)
        return Reply(item, bufs, (lambda: w.store.release(regions)) if regions else None)
    return ranged_reply(w, conn, key, handle, zc, ranges)


@OPS.op("wait_version")
def wait_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    v = w.version_book().wait(arg(h, "name", str), arg(h, "min_version", int), arg(h, "timeout", (int, float), None))
    return Reply({"version": v})
