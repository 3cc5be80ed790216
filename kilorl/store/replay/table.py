"""One replay table as a worker holds it: chunks of rows, a FIFO ring of slots, a sampler.

Rows arrive in chunks (consecutive rows, each column encoded on its own) and take the next
``rows`` slots of a ring of ``capacity``; the slots they overwrite are evicted, and a chunk
goes once none of its rows is live. Raw columns (every column of an uncompressed table,
and the narrow ones of a compressed table, ``TableSpec.packed``) live in preallocated ring
columns: a sample is one gather per column. Packed columns keep the encoded chunks, and a
sample decodes each chunk it touches once, outside the table's lock; frame-stack columns
keep each frame encoded on its own, and a sample decodes only the frames its rows hold.

Every row has an id (its insert position over the table's life): a priority update names
ids, so an update for a row evicted meanwhile is recognised and skipped.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kilorl.store.errors import InvalidRequest, KeyNotFound, StoreTimeout
from kilorl.store.replay import codec
from kilorl.store.replay.chunks import ChunkLog, ColumnPart, Decoded
from kilorl.store.replay.gather import Chunk, FrameSample, gather
from kilorl.store.replay.limiter import RateLimiter
from kilorl.store.replay.spec import TableSpec
from kilorl.store.replay.sumtree import SumTree

RECENT_INSERTS = 4096
"""Inserts a table remembers by key to recognise a repeated one (a client repeats only its
last request after a reconnect, so a few per client are plenty)."""


@dataclass
class Sample:
    columns: dict[str, np.ndarray]
    """Every column's sampled rows; with ``frames=True`` all but the frame-stack columns."""
    ids: np.ndarray
    probabilities: np.ndarray
    size: int
    total: float | None
    """The priority mass the sample was drawn from (prioritized), else None."""
    frame_samples: list[FrameSample] = field(default_factory=list)
    """With ``frames=True``: each stack group's sampled frames and indices."""


class Table:
    """A table's rows, sampler and rate limiter; thread-safe (one condition per table)."""

    def __init__(self, spec: TableSpec, log: ChunkLog | None = None) -> None:
        """``log``: where a durable table's chunks are written back (``TableSpec.durable``)."""
        self.spec = spec
        self.log = log
        cap = spec.capacity
        self.cond = threading.Condition()
        self.closed = False
        self.limiter = RateLimiter(spec.limiter)
        self.rng = np.random.Generator(np.random.PCG64(spec.seed))
        self.slot_id = np.full(cap, -1, np.int64)
        self.size = 0
        self.next_id = 0
        self.insert_calls = self.sample_calls = 0
        self.recent_inserts: OrderedDict[str, int] = OrderedDict()
        """The last ``RECENT_INSERTS`` inserts' first chunk keys -> first row id: an insert
        repeated after a lost reply (the client reconnects and sends it again) is found here
        and answered without storing its rows twice."""
        self.repeated_inserts = 0
        self.decoded_frames = 0
        """Frames of frame-stack columns decoded by samples (each sample decodes only its rows')."""
        self.waiting = {"insert": 0, "sample": 0}
        """Calls of each side waiting for the rate limiter now."""
        self.tree = SumTree(cap) if spec.sampler == "prioritized" else None
        self.max_priority = 1.0
        self.packed = [c for c in spec.columns if spec.packed(c)]
        self.compressed = bool(self.packed)
        self.ring = {c.name: np.zeros((cap, *c.shape), c.dtype) for c in spec.columns if not spec.packed(c)}
        self.ring_row_nbytes = sum(c.row_nbytes for c in spec.columns if not spec.packed(c))
        self.chunks: dict[int, Chunk] = {}
        self.stored_bytes = 0
        """Encoded bytes of the live chunks' packed columns."""
        if self.compressed:
            self.slot_chunk = np.full(cap, -1, np.int64)
            self.slot_offset = np.zeros(cap, np.int64)
            self.next_chunk = 0

    # ---- inserting ----------------------------------------------------------------------
    def decode_chunk(self, key: str, rows: int, parts: list[ColumnPart], payload: memoryview) -> Decoded:
        """Checks a chunk against the schema and decodes every column; errors name table,
        key and column. Keeps the encoded blobs of a compressed table."""
        spec, where = self.spec, f"replay table {self.spec.name!r}, chunk {key!r}"
        if not isinstance(rows, int) or not 1 <= rows <= spec.capacity:
            raise InvalidRequest(f"{where}: rows must be in [1, capacity {spec.capacity}], got {rows!r}")
        names = [p.name for p in parts]
        expected = [c.name for c in spec.columns]
        if sorted(names) != sorted(expected) or len(set(names)) != len(names):
            missing, extra = sorted(set(expected) - set(names)), sorted(set(names) - set(expected))
            raise InvalidRequest(f"{where}: columns {names} do not match the table's {expected} "
                                 f"(missing {missing}, unknown {extra})")
        if sum(p.nbytes for p in parts) != len(payload):
            raise InvalidRequest(f"{where}: payload holds {len(payload)} bytes, the columns declare "
                                 f"{sum(p.nbytes for p in parts)}")
        decoded, blobs, off, payloads = {}, {}, 0, {}
        for p in parts:
            col = spec.column(p.name)
            blob = payloads[p.name] = payload[off:off + p.nbytes]
            off += p.nbytes
            if p.codec not in ("none", "zstd", "lz4"):
                raise InvalidRequest(f"{where}, column {p.name!r}: unknown codec {p.codec!r}")
            if p.raw_nbytes != rows * col.row_nbytes:
                raise InvalidRequest(f"{where}, column {p.name!r}: {p.raw_nbytes} bytes for {rows} rows, the schema "
                                     f"({col.dtype} {list(col.shape)}) needs {rows * col.row_nbytes}")
            if p.name in spec.stacked:
                blobs[p.name] = (p.codec, bytes(blob))
                continue
            try:
                raw = codec.decompress(blob, p.codec, p.raw_nbytes)
            except (ValueError, InvalidRequest) as exc:
                raise InvalidRequest(f"{where}, column {p.name!r}: corrupt {p.codec} data ({exc})") from None
            decoded[p.name] = np.frombuffer(raw, col.dtype).reshape(rows, *col.shape)
            if spec.packed(col):
                blobs[p.name] = (p.codec, bytes(blob) if p.codec != "none" else bytes(raw))
        return Decoded(key, rows, decoded, blobs, self._frame_pools(where, rows, blobs))

    def _frame_pools(self, where: str, rows: int, blobs: dict[str, tuple[str, bytes]]) -> dict[str, codec.FramePool]:
        """The stacked columns' frame pools of an arriving chunk, every frame decoded once
        as a check (a corrupt chunk is refused, never sampled); errors name the column."""
        pools: dict[str, codec.FramePool] = {}
        for group in self.spec.stack_groups():
            owner = None
            for name in group:
                col = self.spec.column(name)
                try:
                    pools[name] = codec.FramePool(blobs[name][1], blobs[name][0], rows, col.shape[0], col.shape[1:],
                                                  col.dtype, owner)
                    if owner is None:
                        owner = pools[name]
                        owner.decode_all()
                except ValueError as exc:
                    raise InvalidRequest(f"{where}, column {name!r}: corrupt {blobs[name][0]} frame data "
                                         f"({exc})") from None
        return pools

    def insert(self, chunks: list[Decoded], priorities: np.ndarray | None, timeout: float | None) -> int:
        """Stores decoded chunks (consecutive rows, in order) once the rate limiter admits
        them, all under one admission; returns the first row id."""
        total = sum(c.rows for c in chunks)
        if total > self.spec.capacity:
            raise InvalidRequest(f"replay table {self.spec.name!r}: {total} rows in one insert exceed capacity "
                                 f"{self.spec.capacity}")
        if priorities is not None and (priorities.shape != (total,) or np.any(priorities < 0)
                                       or not np.all(np.isfinite(priorities))):
            raise InvalidRequest(f"replay table {self.spec.name!r}, chunk {chunks[0].key!r}: priorities must be "
                                 f"{total} finite numbers >= 0")
        key = chunks[0].key
        with self.cond:
            if key in self.recent_inserts:
                return self._repeated(key)
            self._wait(lambda: key in self.recent_inserts or self.limiter.can_insert(self.size), timeout, "insert")
            if key in self.recent_inserts:  # the first try was admitted while this one waited
                return self._repeated(key)
            first = self.next_id
            self.recent_inserts[key] = first
            if len(self.recent_inserts) > RECENT_INSERTS:
                self.recent_inserts.popitem(last=False)
            pending = []
            for c in chunks:
                if self.log is not None:
                    pending.append(self.log.record(self.next_id, c))
                self._store(c)
            evicted = self.log.evict_before(self.next_id - self.spec.capacity) if self.log is not None else []
            if self.tree is not None:
                slots = (first + np.arange(total, dtype=np.int64)) % self.spec.capacity
                p = priorities if priorities is not None else np.full(total, self.max_priority)
                self.max_priority = max(self.max_priority, float(p.max()))
                self.tree.set(slots, p ** self.spec.alpha)
            self.insert_calls += 1
            self.limiter.inserted_rows(total)
            self.cond.notify_all()
        if self.log is not None:  # outside the lock: samples go on while the writes queue
            self.log.write(pending, evicted)
        return first

    def restore(self, first_id: int, chunk: Decoded, file_key: str) -> list[str]:
        """Stores a chunk read back from L2 under its old row ids (a restarted worker);
        returns the file keys of chunks it evicts."""
        evicted: list[str] = []
        with self.cond:
            self.next_id = first_id
            self._store(chunk)
            if self.log is not None:
                self.log.adopt(first_id, chunk.rows, file_key)
                evicted = self.log.evict_before(self.next_id - self.spec.capacity)
            if self.tree is not None:
                slots = (first_id + np.arange(chunk.rows, dtype=np.int64)) % self.spec.capacity
                self.tree.set(slots, np.full(chunk.rows, self.max_priority ** self.spec.alpha))
            self.limiter.inserted_rows(chunk.rows)
        return evicted

    def attach_log(self, log: ChunkLog) -> int:
        """Makes the table durable from its next insert on; returns the next row id (where a
        snapshot of the rows already held ends)."""
        with self.cond:
            self.log = log
            return self.next_id

    def held_chunks(self, cursor: int, end: int, limit: int) -> tuple[list[tuple[int, Decoded]], int]:
        """Up to ``limit`` chunks holding live rows with ids in ``[cursor, end)``, as
        ``(first id, chunk)``, recorded in the log; and the cursor after them. Takes the lock
        for one short batch, so inserts and samples go on between batches."""
        with self.cond:
            cursor = max(cursor, self.next_id - self.size)
            out: list[tuple[int, Decoded]] = []
            while cursor < end and len(out) < limit:
                if self.compressed:
                    cid = int(self.slot_chunk[cursor % self.spec.capacity])
                    ch = self.chunks[cid]
                    first, rows, key, blobs, pools = ch.first_id, ch.rows, ch.key, ch.blobs, ch.pools
                else:
                    first, rows, key = cursor, min(self.spec.chunk_length, end - cursor), f"snapshot/{cursor}"
                    blobs, pools = {}, {}
                slots = (first + np.arange(rows, dtype=np.int64)) % self.spec.capacity
                cols = {name: ring[slots] for name, ring in self.ring.items()}
                out.append((first, Decoded(key, rows, cols, blobs, pools)))
                cursor = first + rows
            return out, cursor

    def _repeated(self, key: str) -> int:
        self.repeated_inserts += 1
        return self.recent_inserts[key]

    def _store(self, c: Decoded) -> None:
        ids = self.next_id + np.arange(c.rows, dtype=np.int64)
        slots = ids % self.spec.capacity
        self._evict(slots)
        self.slot_id[slots] = ids
        if self.compressed:
            cid = self.next_chunk
            self.next_chunk += 1
            nbytes = sum(len(b) for _, b in c.blobs.values())
            self.chunks[cid] = Chunk(c.key, c.rows, c.blobs, c.rows, nbytes, self.next_id, c.pools)
            self.stored_bytes += nbytes
            self.slot_chunk[slots] = cid
            self.slot_offset[slots] = np.arange(c.rows)
        for name, ring in self.ring.items():
            ring[slots] = c.columns[name]
        self.next_id += c.rows
        self.size = min(self.spec.capacity, self.size + c.rows)

    def _evict(self, slots: np.ndarray) -> None:
        if not self.compressed:
            return
        old = self.slot_chunk[slots]
        old = old[old >= 0]
        if old.size == 0:
            return
        cids, counts = np.unique(old, return_counts=True)
        for cid, n in zip(cids.tolist(), counts.tolist(), strict=True):
            chunk = self.chunks[cid]
            chunk.live -= n
            if chunk.live == 0:
                del self.chunks[cid]
                self.stored_bytes -= chunk.nbytes

    # ---- sampling -----------------------------------------------------------------------
    def sample(self, batch: int, timeout: float | None, frames: bool = False) -> Sample:
        """``batch`` rows drawn with replacement once the rate limiter admits the call.
        ``frames``: the frame-stack columns left as each distinct frame once and indices
        (``Sample.frame_samples``, what a worker sends), not stacked here."""
        if not isinstance(batch, int) or batch < 1:
            raise InvalidRequest(f"batch_size: must be a positive integer, got {batch!r}")
        with self.cond:
            self._wait(lambda: self.limiter.can_sample(self.size), timeout, "sample")
            size = self.size
            total = None
            if self.tree is not None:
                total = self.tree.total
                if total <= 0:
                    raise InvalidRequest(f"replay table {self.spec.name!r}: every row's priority is 0, "
                                         "nothing can be sampled")
                slots = self.tree.sample(self.rng, batch)
                probs = self.tree.get(slots) / total
            else:
                slots = self.rng.integers(0, size, size=batch)  # slots fill from 0: live ones are 0..size-1
                probs = np.full(batch, 1.0 / size)
            ids = self.slot_id[slots]
            self.limiter.sampled_rows(batch)
            self.sample_calls += 1
            columns = {name: ring[slots] for name, ring in self.ring.items()}
            if self.compressed:
                cids = self.slot_chunk[slots]
                offsets = self.slot_offset[slots]
                uniq, inverse = np.unique(cids, return_inverse=True)
                chunks = [self.chunks[c] for c in uniq.tolist()]
            self.cond.notify_all()
        pools: list[FrameSample] = []
        if self.compressed:  # decode outside the lock: inserts and other samples go on
            packed, pools = gather(self.spec, self.packed, chunks, inverse, offsets)
            columns.update(packed)
            if pools:
                with self.cond:
                    self.decoded_frames += sum(len(p.frames) for p in pools)
            if not frames:
                for p in pools:
                    columns.update(p.stacks())
                pools = []
        return Sample(columns, ids, probs, size, total, pools)

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> int:
        """Sets the priorities of rows still held; returns how many were (evicted ones skipped)."""
        if self.tree is None:
            raise InvalidRequest(f"replay table {self.spec.name!r}: priorities need sampler 'prioritized'")
        if ids.shape != priorities.shape:
            raise InvalidRequest(f"priorities: {priorities.size} values for {ids.size} ids")
        if np.any(priorities < 0) or not np.all(np.isfinite(priorities)):
            raise InvalidRequest("priorities: must be finite numbers >= 0")
        with self.cond:
            slots = ids % self.spec.capacity
            live = (self.slot_id[slots] == ids) & (ids >= 0)
            if np.any(live):
                self.tree.set(slots[live], priorities[live] ** self.spec.alpha)
                self.max_priority = max(self.max_priority, float(priorities[live].max()))
            return int(live.sum())

    # ---- waiting and stats --------------------------------------------------------------
    def _wait(self, admitted: Any, timeout: float | None, side: str) -> None:
        """Waits (lock held) until ``admitted()``; the time counts as the side's blocked seconds."""
        if admitted():
            return
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        self.waiting[side] += 1
        try:
            while not admitted():
                if self.closed:
                    raise KeyNotFound(f"replay table {self.spec.name!r} was dropped while a call waited")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise StoreTimeout(f"replay table {self.spec.name!r}: {side} waited {timeout}s for the "
                                       f"rate limiter (samples_per_insert={self.limiter.spi}, "
                                       f"size {self.size}, min_size_to_sample {self.limiter.min_size})")
                self.cond.wait(left if left is not None else 1.0)
        finally:
            self.waiting[side] -= 1
            waited = time.monotonic() - start
            if side == "insert":
                self.limiter.blocked_insert_s += waited
            else:
                self.limiter.blocked_sample_s += waited

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def stats(self) -> dict[str, Any]:
        with self.cond:
            raw = self.size * self.spec.row_nbytes
            stored = self.stored_bytes + self.size * self.ring_row_nbytes
            return {"name": self.spec.name, "rows": self.size, "capacity": self.spec.capacity,
                    "inserted_rows": self.next_id, "insert_calls": self.insert_calls,
                    "repeated_inserts": self.repeated_inserts, "waiting_inserts": self.waiting["insert"],
                    "waiting_samples": self.waiting["sample"],
                    "sampled_rows": self.limiter.sampled, "sample_calls": self.sample_calls,
                    "decoded_frames": self.decoded_frames,
                    "stored_bytes": stored, "raw_bytes": raw,
                    "compression_ratio": (raw / stored) if stored else 1.0,
                    "chunks": len(self.chunks) if self.compressed else None,
                    **(self.log.stats() if self.log is not None else {}),
                    "priority_total": self.tree.total if self.tree is not None else None,
                    **self.limiter.stats()}
