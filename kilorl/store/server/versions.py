"""Versioned-object ops: ``latest_version``, ``get_version``, ``wait_version`` (publish is a write)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound, VersionGone
from kilorl.store.local.versions import version_key
from kilorl.store.server.reads import ReadBatch
from kilorl.store.server.request import OpTable, Reply, arg
from kilorl.store.server.version_book import VersionBook

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()


@OPS.op("latest_version")
def latest_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"version": w.version_book().latest(arg(h, "name", str))})


def _parse_ranges(raw: Any, field: str) -> list[tuple[int, int]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidRequest(f"{field}: must be a list of [offset, length], got {type(raw).__name__}")
    out = []
    for i, r in enumerate(raw):
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)):
            raise InvalidRequest(f"{field}[{i}]: must be [offset, length], got {r!r}")
        out.append((r[0], r[1]))
    return out


def _ranges(h: dict[str, Any]) -> list[tuple[int, int]] | None:
    return _parse_ranges(h.get("ranges"), "ranges")


@OPS.op("get_version")
def get_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    name = arg(h, "name", str)
    version = arg(h, "version", int, None)
    ranges = _ranges(h)
    zc = arg(h, "zc", int, None)
    book = w.version_book()
    for _ in range(8):  # the latest may be reclaimed between resolve and acquire: retry
        v = book.resolve(name, version)
        batch = ReadBatch(w, conn, zc)
        try:
            _add_version(w, batch, book, version_key(name, v), ranges)
        except KeyNotFound:
            batch.abort()
            if version is not None:
                raise VersionGone(f"{name!r} version {version} was reclaimed") from None
            continue
        return batch.reply({"version": v}, single=ranges is None)
    raise KeyNotFound(f"{name!r}: could not read a stable latest version")


def _add_version(w: Worker, batch: ReadBatch, book: VersionBook, key: str,
                 ranges: list[tuple[int, int]] | None, pull_whole: bool = False) -> None:
    """One version (hidden ``key``) into ``batch``: whole, or just ``ranges`` of it (pulled
    alone when the bytes are on another worker, unless ``pull_whole``: then the whole object
    is copied here once and this worker's later readers read it without crossing again)."""
    if not w.store.exists([key])[0]:
        if ranges is not None and not pull_whole:
            remote = book.fetch_ranges(key, ranges)
            if remote is not None:
                for handle in remote:
                    batch.add(handle)
                return
        else:
            book.make_local(key)
    handle = w.store.acquire(key)
    if ranges is None:
        batch.add(handle)
    else:
        batch.add_ranges(key, handle, ranges)


def _version_reads(h: dict[str, Any]) -> list[tuple[str, list[tuple[int, int]] | None]]:
    raw = arg(h, "reads", list)
    if not raw or len(raw) > 4096:
        raise InvalidRequest(f"reads: must list 1 to 4096 [name, ranges or None], got {len(raw)}")
    out = []
    for i, r in enumerate(raw):
        if not (isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and r[0]):
            raise InvalidRequest(f"reads[{i}]: must be [name, ranges or None], got {r!r}")
        out.append((r[0], _parse_ranges(r[1], f"reads[{i}].ranges")))
    return out


@OPS.op("get_versions")
def get_versions(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """Several published names at one version number, in one request and one reply.

    For an object published as several names (parts first, the first name, its anchor,
    last): the version is ``version``, else the anchor's latest, after waiting for it to
    reach ``min_version`` when given, so a wake-up carries the version's bytes with it.
    Each read is whole or byte ``ranges``; ``items`` lists one entry per whole read and
    one per range, in order. A part missing at that version is ``VersionGone``. With
    ``pull_whole`` a part held by another worker is copied here whole (once) before its
    ranges are served, so every reader on this worker's node shares one crossing."""
    reads = _version_reads(h)
    version = arg(h, "version", int, None)
    min_version = arg(h, "min_version", int, None)
    zc = arg(h, "zc", int, None)
    pull_whole = arg(h, "pull_whole", bool, False)
    book = w.version_book()
    anchor = reads[0][0]
    if min_version is not None and version is None:
        book.wait(anchor, min_version, arg(h, "timeout", (int, float), None))
    missing = anchor
    for _ in range(8):  # a writer ahead may reclaim the version while it is read: read the newer one
        v = book.resolve(anchor, version)
        batch = ReadBatch(w, conn, zc)
        try:
            for missing, ranges in reads:
                _add_version(w, batch, book, version_key(missing, v), ranges, pull_whole)
        except KeyNotFound:
            batch.abort()
            if version is not None:
                break
            continue
        except BaseException:
            batch.abort()
            raise
        return batch.reply({"version": v})
    raise VersionGone(f"{missing!r} version {v} is not held (reclaimed, or never published)")


@OPS.op("wait_version")
def wait_version(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    v = w.version_book().wait(arg(h, "name", str), arg(h, "min_version", int), arg(h, "timeout", (int, float), None))
    return Reply({"version": v})
