"""Durable replay tables: every chunk written back to the worker's L2 directory, read again
by a restarted worker.

A durable table's chunks go through an ``L2Store`` of their own (``<l2 dir>/replay``, apart
from the objects' files, so neither side's start-up scan sees the other's), one file per
chunk: the chunk's encoded columns as the client sent them (raw bytes for a column the table
keeps raw) and a header naming table, first row id, rows and codecs. Writes are queued
(``WRITE_BACK_L2``) and made outside the table's lock, so sampling goes on while they land;
a chunk whose rows are all evicted has its file deleted. The table's definition is written
through (fsynced) when the table is made. A worker started on the same directory remakes
each table from its definition and stores its chunks again in row-id order, ids kept.
"""

from __future__ import annotations

import bisect
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilorl.store.local.l2 import L2Entry, L2Store
from kilorl.store.replay.chunks import ColumnPart, Decoded
from kilorl.store.replay.spec import TableSpec

logger = logging.getLogger("kilorl.store.server.replay_durable")
SPEC = "spec"
CHUNK = "chunk"


@dataclass
class PendingChunk:
    """A chunk stored under the table's lock, to be queued for L2 after it is released."""

    key: str
    meta: dict[str, Any]
    data: bytes


class ReplayL2:
    """The worker's L2 store for durable replay tables; one per worker."""

    def __init__(self, directory: str, queue_size: int) -> None:
        self.live: set[str] = set()
        """File keys of chunks still held (a write for an evicted chunk is skipped)."""
        self.lock = threading.Lock()
        self.store = L2Store(f"{directory}/replay", queue_size, self._is_live, lambda key: True)

    def _is_live(self, key: str, gen: int) -> bool:
        with self.lock:
            return key in self.live

    def write_spec(self, spec: TableSpec) -> None:
        """The table's definition, fsynced before ``replay.create`` returns."""
        self.store.write(f"{spec.name}/{SPEC}", {"kind": SPEC, "table": spec.to_wire()}, 0, None, memoryview(b""))

    def scan(self) -> list[L2Entry]:
        return self.store.scan()

    def close(self) -> None:
        self.store.close()


class ChunkLog:
    """One durable table's chunks in L2: queued writes, deletes of evicted chunks, counts."""

    def __init__(self, l2: ReplayL2, spec: TableSpec) -> None:
        self.l2, self.spec = l2, spec
        self.held: list[tuple[int, int, str]] = []
        """(first row id, rows, file key) of every chunk with a live row, oldest first."""
        self.queued = self.flushed = 0
        self.snapshot_left: int | None = None
        """Rows a running snapshot has still to record (None: none running)."""

    def record(self, first_id: int, chunk: Decoded) -> PendingChunk:
        """Called under the table's lock as the chunk is stored: what to write for it."""
        key = f"{self.spec.name}/{CHUNK}/{first_id}"
        parts, blobs = [], []
        for c in self.spec.columns:
            codec, blob = chunk.blobs.get(c.name) or ("none", np.ascontiguousarray(chunk.columns[c.name]).tobytes())
            parts.append({"name": c.name, "codec": codec, "nbytes": len(blob),
                          "raw_nbytes": chunk.rows * c.row_nbytes})
            blobs.append(blob)
        bisect.insort(self.held, (first_id, chunk.rows, key))  # a snapshot's chunks come after newer inserts
        with self.l2.lock:
            self.l2.live.add(key)
        return PendingChunk(key, {"kind": CHUNK, "table": self.spec.name, "first_id": first_id, "rows": chunk.rows,
                                  "chunk_key": chunk.key, "columns": parts}, b"".join(blobs))

    def adopt(self, first_id: int, rows: int, key: str) -> None:
        """A chunk already in L2 (read back at start-up) held again."""
        bisect.insort(self.held, (first_id, rows, key))
        with self.l2.lock:
            self.l2.live.add(key)

    def evict_before(self, oldest_live_id: int) -> list[str]:
        """Chunks whose rows all precede ``oldest_live_id``; called under the table's lock."""
        n = 0
        while n < len(self.held) and self.held[n][0] + self.held[n][1] <= oldest_live_id:
            n += 1
        gone = [k for _, _, k in self.held[:n]]
        del self.held[:n]
        if gone:
            with self.l2.lock:
                self.l2.live.difference_update(gone)
        return gone

    def write(self, pending: list[PendingChunk], evicted: list[str]) -> None:
        """Queues the writes and deletes (outside the table's lock: a full queue waits)."""
        for p in pending:
            self.queued += 1
            self.l2.store.enqueue_write(p.key, 0, p.meta, len(p.data), None, memoryview(p.data), self._done)
        for key in evicted:
            self.l2.store.enqueue_delete(key)

    def _done(self, wrote: Any) -> None:
        self.flushed += 1

    def drop(self) -> None:
        """Deletes the table's files (its definition last)."""
        with self.l2.lock:
            keys = [k for _, _, k in self.held]
            self.l2.live.difference_update(keys)
        for key in keys:
            self.l2.store.enqueue_delete(key)
        self.l2.store.enqueue_delete(f"{self.spec.name}/{SPEC}")
        self.held.clear()

    def stats(self) -> dict[str, Any]:
        return {"durable_queued_chunks": self.queued, "durable_flushed_chunks": self.flushed,
                "durable_pending_chunks": self.queued - self.flushed, "snapshot_rows_left": self.snapshot_left}


SNAPSHOT_BATCH = 32
"""Chunks a snapshot records per hold of the table's lock."""


def snapshot(table: Any, chunk_log: ChunkLog) -> None:
    """Writes every row ``table`` holds to L2 as chunks, a few per hold of its lock, while
    inserts (logged already: ``attach_log``) and samples go on; a chunk evicted before its
    write is skipped. Runs on a thread of its own."""
    end = table.attach_log(chunk_log)
    cursor = 0
    try:
        while True:
            batch, cursor = table.held_chunks(cursor, end, SNAPSHOT_BATCH)
            if not batch:
                break
            with table.cond:
                pending = [chunk_log.record(first, chunk) for first, chunk in batch]
                evicted = chunk_log.evict_before(table.next_id - table.spec.capacity)
            chunk_log.snapshot_left = max(0, end - cursor)
            chunk_log.write(pending, evicted)  # waits while the write-back queue is full
    except Exception:
        logger.exception("snapshot of replay table %r failed", table.spec.name)
    finally:
        chunk_log.snapshot_left = None


def recovered_chunks(entries: list[L2Entry]) -> dict[str, tuple[L2Entry, list[L2Entry]]]:
    """Table name -> (definition entry, chunk entries in row-id order)."""
    specs = {e.meta["table"]["name"]: e for e in entries if e.meta.get("kind") == SPEC}
    chunks: dict[str, list[L2Entry]] = {}
    for e in entries:
        if e.meta.get("kind") == CHUNK:
            chunks.setdefault(e.meta["table"], []).append(e)
    out = {}
    for name, spec in specs.items():
        out[name] = (spec, sorted(chunks.pop(name, []), key=lambda e: e.meta["first_id"]))
    for name in chunks:
        logger.warning("replay L2: chunks of table %r without its definition are skipped", name)
    return out


def read_chunk(entry: L2Entry) -> tuple[list[ColumnPart], memoryview]:
    """A chunk file's column parts and payload (its encoded columns, one after another)."""
    data = memoryview(bytearray(entry.size))
    L2Store.read_into(entry.path, entry.data_offset, data)
    parts = [ColumnPart(p["name"], p["codec"], int(p["nbytes"]), int(p["raw_nbytes"])) for p in entry.meta["columns"]]
    return parts, data
