"""The replay command group of a ``StoreClient`` (``client.replay_tables``), over its one call.

The client encodes a chunk (each column compressed on its own with the table's codec)
so only encoded bytes cross the socket; a sample comes back as raw columns that the
returned arrays view without a copy.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilorl.store.errors import InvalidRequest
from kilorl.store.replay import codec
from kilorl.store.replay.spec import TableSpec

Call = Callable[..., tuple[dict[str, Any], "memoryview | None"]]
"""``call(header, buffers=()) -> (reply header, payload)``: the client's request function."""

_keys = itertools.count()
_PROCESS = f"{os.getpid()}-{secrets.token_hex(4)}"
"""Prefix of this process's chunk keys: unique across hosts and restarts, so a worker takes
an insert it already holds (same first chunk key) for a repeat, never for another's rows."""


@dataclass
class SampleBatch:
    """Sampled rows: ``columns`` of ``[B, ...]``, each row's id and sampling probability."""

    columns: dict[str, np.ndarray]
    ids: np.ndarray
    probabilities: np.ndarray
    size: int
    """Rows the table held when it drew the sample (importance weights need it)."""
    shards: np.ndarray | None = None
    """Each row's shard (a ``ShardedTable``'s sample), else None."""
    total: float | None = None
    """The prioritized table's priority mass when it drew the sample."""


def encode_chunk(spec: TableSpec, columns: Mapping[str, np.ndarray]) -> tuple[int, list[dict[str, Any]], list[Any]]:
    """``(rows, column parts, buffers)`` of a chunk; a column that breaks the schema is named."""
    names = [c.name for c in spec.columns]
    if set(columns) != set(names):
        raise InvalidRequest(f"replay table {spec.name!r}: columns {sorted(columns)} do not match the table's {names}")
    rows = None
    parts, bufs = [], []
    raws = {}
    for c in spec.columns:
        a = np.asarray(columns[c.name])
        if a.dtype != np.dtype(c.dtype) or a.shape[1:] != c.shape:
            raise InvalidRequest(f"replay table {spec.name!r}, column {c.name!r}: got {a.dtype} {list(a.shape)}, "
                                 f"the table holds {c.dtype} rows of shape {list(c.shape)}")
        if rows is None:
            rows = a.shape[0]
        elif a.shape[0] != rows:
            raise InvalidRequest(f"replay table {spec.name!r}, column {c.name!r}: {a.shape[0]} rows, "
                                 f"other columns have {rows}")
        raws[c.name] = np.ascontiguousarray(a)
    stacked = {}
    for group in spec.stack_groups():  # columns sharing frames are encoded together
        name = spec.compression if spec.packed(spec.column(group[0])) else "none"
        stacked.update(zip(group, codec.encode_stack_group([raws[g] for g in group], name, spec.compression_level),
                           strict=True))
    for c in spec.columns:
        raw = raws[c.name]
        name = spec.compression if spec.packed(c) else "none"
        blob = stacked[c.name] if c.name in stacked else codec.compress(raw, name, spec.compression_level)
        parts.append({"name": c.name, "codec": name, "nbytes": len(blob), "raw_nbytes": raw.nbytes})
        bufs.append(blob)
    return int(rows or 0), parts, bufs


def _rows(spec: TableSpec, columns: Mapping[str, np.ndarray]) -> int:
    names = [c.name for c in spec.columns]
    if set(columns) != set(names):
        raise InvalidRequest(f"replay table {spec.name!r}: columns {sorted(columns)} do not match the table's {names}")
    return len(columns[names[0]])


class ReplayTables:
    """create / insert / sample / update_priorities / info / list / drop on one worker."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._specs: dict[str, TableSpec] = {}

    def create(self, spec: TableSpec) -> bool:
        """Makes the table (True), or finds it made with the same definition (False)."""
        resp, _ = self._call({"op": "replay.create", "table": spec.to_wire()})
        self._specs[spec.name] = spec
        return bool(resp["created"])

    def spec(self, table: str) -> TableSpec:
        spec = self._specs.get(table)
        if spec is None:
            resp, _ = self._call({"op": "replay.describe", "table": table})
            spec = self._specs[table] = TableSpec.from_wire(resp["table"])
        return spec

    def insert(self, table: str, columns: Mapping[str, np.ndarray], *, key: str | None = None,
               priorities: np.ndarray | None = None, timeout: float | None = None) -> int:
        """Inserts consecutive rows in one request, cut into chunks of the table's
        ``chunk_length`` rows when it keeps a column encoded (``TableSpec.packed``); blocks while the rate limiter holds
        inserts back (``StoreTimeout`` after ``timeout``). Returns the first row id.
        ``key`` names the insert (unique per process by default): the worker answers a
        repeat of a key it holds (the client's retry after a reconnect) with the first
        row id it gave, storing nothing twice."""
        spec = self.spec(table)
        key = key or f"{_PROCESS}/{next(_keys)}"
        n = _rows(spec, columns)
        step = spec.chunk_length if any(spec.packed(c) for c in spec.columns) else max(1, n)
        chunks, bufs = [], []
        for j, lo in enumerate(range(0, n, step)):
            rows, parts, b = encode_chunk(spec, {k: v[lo:lo + step] for k, v in columns.items()})
            chunks.append({"key": f"{key}/{j}", "rows": rows, "columns": parts})
            bufs.extend(b)
        return self.insert_encoded(table, chunks, bufs, priorities, timeout)

    def insert_encoded(self, table: str, chunks: list[dict[str, Any]], buffers: list[Any],
                       priorities: np.ndarray | None = None, timeout: float | None = None) -> int:
        """Sends already encoded chunks (``[{key, rows, columns}]`` from ``encode_chunk``) as they are."""
        header = {"op": "replay.insert", "table": table, "chunks": chunks, "timeout": timeout}
        bufs = list(buffers)
        if priorities is not None:
            header["priorities"] = True
            bufs.append(np.ascontiguousarray(priorities, np.float64))
        return int(self._call(header, bufs)[0]["first_id"])

    def sample(self, table: str, batch_size: int, timeout: float | None = None) -> SampleBatch:
        """``batch_size`` rows in one request; blocks while the rate limiter holds samples back."""
        spec = self.spec(table)
        resp, payload = self._call({"op": "replay.sample", "table": table, "batch_size": batch_size,
                                    "timeout": timeout})
        return decode_sample(spec, resp, payload)

    def update_priorities(self, table: str, ids: np.ndarray, priorities: np.ndarray) -> int:
        """New priorities of sampled rows; rows evicted meanwhile are skipped. Returns how many were set."""
        ids = np.ascontiguousarray(ids, np.int64)
        prios = np.ascontiguousarray(priorities, np.float64)
        if ids.shape != prios.shape or ids.ndim != 1:
            raise InvalidRequest(f"priorities: {prios.shape} values for ids of shape {ids.shape}")
        resp, _ = self._call({"op": "replay.update_priorities", "table": table, "n": int(ids.size)}, [ids, prios])
        return int(resp["updated"])

    def info(self, table: str) -> dict[str, Any]:
        """Rows, inserts, samples, stored and raw bytes, blocked seconds per side."""
        return self._call({"op": "replay.info", "table": table})[0]

    def snapshot(self, table: str) -> bool:
        """Writes the table's rows to the worker's L2 in the background, sampling going on; the
        table is durable from then on. False when it already was."""
        return bool(self._call({"op": "replay.snapshot", "table": table})[0]["started"])

    def list(self) -> list[dict[str, Any]]:
        return self._call({"op": "replay.list"})[0]["tables"]

    def drop(self, table: str) -> bool:
        self._specs.pop(table, None)
        return bool(self._call({"op": "replay.drop", "table": table})[0]["dropped"])


def decode_sample(spec: TableSpec, resp: dict[str, Any], payload: memoryview | None) -> SampleBatch:
    """Views the reply's buffers as arrays (ids, probabilities, then every column); a
    frame-stack column arrives as ``[B, k]`` frame indices into its group's distinct frames
    (after the columns, ``resp["pools"]``) and is stacked here, one copy."""
    n = int(resp["rows"])
    buf = payload if payload is not None else memoryview(b"")
    ids = np.frombuffer(buf, np.int64, n, 0)
    probs = np.frombuffer(buf, np.float64, n, 8 * n)
    pools = resp.get("pools") or []
    pooled = {name for p in pools for name in p["columns"]}
    off, cols = 16 * n, {}
    for c in spec.columns:
        if c.name in pooled:
            nbytes = n * c.shape[0] * 4
            cols[c.name] = np.frombuffer(buf[off:off + nbytes], np.int32).reshape(n, c.shape[0])
        else:
            nbytes = n * c.row_nbytes
            cols[c.name] = np.frombuffer(buf[off:off + nbytes], c.dtype).reshape(n, *c.shape)
        off += nbytes
    for p in pools:
        first = spec.column(p["columns"][0])
        frame_nbytes = first.row_nbytes // first.shape[0]
        nbytes = int(p["frames"]) * frame_nbytes
        frames = np.frombuffer(buf[off:off + nbytes], first.dtype).reshape(int(p["frames"]), *first.shape[1:])
        off += nbytes
        for name in p["columns"]:
            cols[name] = frames[cols[name]]
    return SampleBatch(cols, ids, probs, int(resp["size"]), total=resp.get("total"))
