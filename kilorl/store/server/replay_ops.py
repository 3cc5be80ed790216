"""The ``replay.*`` ops: every store worker serves replay tables as a service of its own.

``install(worker)`` hosts a ``ReplayService`` (the worker's tables by name) and registers
its ops. A request that breaks a table's schema or carries a corrupt chunk is refused with
an error naming table, chunk key and column; the connection, the worker and every other
table go on serving. Chunks arrive encoded (the client compresses) and samples leave raw:
one header plus one buffer per column, never pickled.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.store.errors import InvalidRequest, KeyNotFound
from kilorl.store.replay.chunks import ColumnPart
from kilorl.store.replay.spec import TableSpec
from kilorl.store.replay.table import Table
from kilorl.store.server.replay_durable import ChunkLog, ReplayL2, read_chunk, recovered_chunks, snapshot
from kilorl.store.server.request import OpTable, Reply, arg

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()
log = logging.getLogger("kilorl.store.server.replay_ops")


class ReplayService:
    """The worker's replay tables; stopping the worker wakes every call waiting on one."""

    def __init__(self, disk_bytes: int = 0, l2_dir: str | None = None, write_back_queue: int = 4096) -> None:
        self.tables: dict[str, Table] = {}
        self.lock = threading.Lock()
        self.disk_bytes = disk_bytes
        """The worker's disk tier (reported when a table does not fit: chunks stay in memory)."""
        self.l2 = ReplayL2(l2_dir, write_back_queue) if l2_dir else None
        """Where durable tables' chunks are written back (None: the worker has no L2)."""

    def start(self, worker: Worker) -> None:
        """Remakes the durable tables found in L2 (a restarted worker), before serving."""
        if self.l2 is None:
            return
        for name, (spec_entry, chunks) in recovered_chunks(self.l2.scan()).items():
            try:
                spec = TableSpec.from_wire(spec_entry.meta["table"])
            except InvalidRequest as exc:
                log.warning("replay L2: table %r not recovered: %s", name, exc)
                continue
            table = self.tables[name] = Table(spec, ChunkLog(self.l2, spec))
            evicted = []
            for entry in chunks:
                try:
                    parts, payload = read_chunk(entry)
                    chunk = table.decode_chunk(entry.meta["chunk_key"], entry.meta["rows"], parts, payload)
                except (OSError, InvalidRequest, KeyError) as exc:
                    log.warning("replay L2: a chunk of table %r not recovered: %s", name, exc)
                    continue
                evicted += table.restore(int(entry.meta["first_id"]), chunk, entry.key)
            table.log.write([], evicted)
            log.info("replay L2: table %r recovered with %d rows", name, table.size)

    def stop(self) -> None:
        with self.lock:
            tables = list(self.tables.values())
        for t in tables:
            t.close()
        if self.l2 is not None:
            self.l2.close()  # every queued chunk written

    def table(self, name: Any) -> Table:
        if not isinstance(name, str):
            raise InvalidRequest(f"table: expected a table name, got {type(name).__name__}")
        with self.lock:
            t = self.tables.get(name)
        if t is None:
            raise KeyNotFound(f"replay table {name!r} does not exist on this worker (replay.create makes it)")
        return t

    def create(self, spec: TableSpec) -> bool:
        with self.lock:
            old = self.tables.get(spec.name)
            if old is None:
                self._check_room(spec)
                if spec.durable and self.l2 is None:
                    raise InvalidRequest(f"table.durable: replay table {spec.name!r} is durable but this worker has "
                                         "no L2 directory (start it with --l2-dir)")
                log_ = None
                if spec.durable:
                    self.l2.write_spec(spec)
                    log_ = ChunkLog(self.l2, spec)
                self.tables[spec.name] = Table(spec, log_)
                return True
        if old.spec != spec:
            raise InvalidRequest(f"replay table {spec.name!r} exists with another definition "
                                 f"({old.spec.to_wire()}); drop it first")
        return False

    def _check_room(self, spec: TableSpec) -> None:
        """Refuses a table whose ``capacity x bytes per row`` (raw: the codec's ratio is not
        known before rows arrive) exceeds this host's available memory less what the other
        tables may still grow by; the error names both numbers and the disk tier."""
        import psutil

        need = spec.capacity * spec.row_nbytes
        promised = sum(max(0, t.spec.capacity * t.spec.row_nbytes - t.stats()["stored_bytes"])
                       for t in self.tables.values())
        free = psutil.virtual_memory().available - promised
        if need > free:
            raise InvalidRequest(
                f"replay table {spec.name!r}: capacity {spec.capacity} x {spec.row_nbytes} bytes per row = "
                f"{_size(need)} does not fit this worker's memory ({_size(max(free, 0))} available, "
                f"{_size(promised)} of it promised to its other replay tables) nor its disk tier "
                f"({_size(self.disk_bytes)}; replay chunks are kept in memory): lower capacity")

    def snapshot(self, name: str) -> bool:
        """Starts writing every row of table ``name`` to L2 on a thread of its own (the table
        is durable from now on); False when it already is (its chunks are written as they come)."""
        table = self.table(name)
        if self.l2 is None:
            raise InvalidRequest(f"replay table {name!r}: a snapshot needs a worker with an L2 directory (--l2-dir)")
        with table.cond:
            if table.log is not None:
                return False
            chunk_log = ChunkLog(self.l2, table.spec)
            chunk_log.snapshot_left = table.next_id
        self.l2.write_spec(table.spec)  # as made: a client that makes it again finds the same definition
        threading.Thread(target=snapshot, args=(table, chunk_log), name=f"replay-snapshot-{name}", daemon=True).start()
        return True

    def drop(self, name: str) -> bool:
        with self.lock:
            t = self.tables.pop(name, None)
        if t is not None:
            t.close()
            if t.log is not None:
                t.log.drop()
        return t is not None


def install(worker: Worker) -> ReplayService:
    """Hosts the replay service in ``worker`` and registers the ``replay.*`` ops."""
    service = ReplayService(worker.rc.disk_bytes, worker.rc.spec.l2_dir, worker.rc.spec.write_back_queue)
    worker.add_service(service)
    worker.replay = service
    for op, fn in OPS.items():
        worker.register(op, fn)
    return service


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB ({n} bytes)"


def _service(w: Worker) -> ReplayService:
    service = getattr(w, "replay", None)
    if service is None:
        raise InvalidRequest("op: this worker hosts no replay service")
    return service


def _timeout(h: dict[str, Any]) -> float | None:
    t = arg(h, "timeout", (int, float), None)
    if t is not None and (not math.isfinite(t) or t < 0):
        raise InvalidRequest(f"timeout: must be >= 0 seconds, got {t}")
    return t


@OPS.op("replay.create")
def create(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    spec = TableSpec.from_wire(arg(h, "table", dict))
    return Reply({"created": _service(w).create(spec), "table": spec.to_wire()})


@OPS.op("replay.describe")
def describe(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"table": _service(w).table(h.get("table")).spec.to_wire()})


def _parts(table: Table, key: str, columns: Any) -> list[ColumnPart]:
    where = f"replay table {table.spec.name!r}, chunk {key!r}"
    if not isinstance(columns, list):
        raise InvalidRequest(f"{where}: columns: expected a list")
    parts = []
    for c in columns:
        try:
            parts.append(ColumnPart(str(c["name"]), str(c["codec"]), int(c["nbytes"]), int(c["raw_nbytes"])))
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest(f"{where}: column entry {c!r} needs name, codec, nbytes, raw_nbytes") from None
    return parts


@OPS.op("replay.insert")
def insert(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """Chunks of consecutive rows (``chunks``: [{key, rows, columns}], their encoded columns
    one after another in the payload, then the rows' float64 priorities if ``priorities``)."""
    table = _service(w).table(h.get("table"))
    specs = arg(h, "chunks", list)
    if not specs or not all(isinstance(c, dict) for c in specs):
        raise InvalidRequest(f"replay table {table.spec.name!r}: chunks: expected a non-empty list of "
                             "{key, rows, columns}")
    payload = memoryview(conn.fs.read_payload())
    chunks, off = [], 0
    for c in specs:
        key, rows = arg(c, "key", str), arg(c, "rows", int)
        parts = _parts(table, key, c.get("columns"))
        n = sum(p.nbytes for p in parts)
        chunks.append(table.decode_chunk(key, rows, parts, payload[off:off + n]))
        off += n
    priorities = None
    if h.get("priorities"):
        total = sum(c.rows for c in chunks)
        if len(payload) - off != 8 * total:
            raise InvalidRequest(f"replay table {table.spec.name!r}, chunk {chunks[0].key!r}: expected {total} "
                                 f"float64 priorities after the columns, got {len(payload) - off} bytes")
        priorities = np.frombuffer(payload[off:], np.float64)
    elif off != len(payload):
        raise InvalidRequest(f"replay table {table.spec.name!r}, chunk {chunks[-1].key!r}: payload holds "
                             f"{len(payload)} bytes, the columns declare {off}")
    return Reply({"first_id": table.insert(chunks, priorities, _timeout(h))})


@OPS.op("replay.sample")
def sample(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    table = _service(w).table(h.get("table"))
    """Ids, probabilities, then every column's rows in the table's order; a frame-stack
    column as its ``[B, k]`` int32 frame indices, its group's distinct frames after all
    columns (``pools``: each frame crosses the socket once; the client stacks them)."""
    s = table.sample(arg(h, "batch_size", int), _timeout(h), frames=True)
    index = {name: fs.index[name] for fs in s.frame_samples for name in fs.columns}
    cols = [np.ascontiguousarray(index[c.name] if c.name in index else s.columns[c.name]) for c in table.spec.columns]
    header = {"size": s.size, "rows": int(s.ids.size), "total": s.total,
              "pools": [{"columns": list(fs.columns), "frames": len(fs.frames)} for fs in s.frame_samples]}
    return Reply(header, [s.ids.astype(np.int64), s.probabilities.astype(np.float64), *cols,
                          *(fs.frames for fs in s.frame_samples)])


@OPS.op("replay.update_priorities")
def update_priorities(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    table = _service(w).table(h.get("table"))
    n = arg(h, "n", int)
    payload = memoryview(conn.fs.read_payload())
    if n < 0 or len(payload) != 16 * n:
        raise InvalidRequest(f"priorities: payload of {len(payload)} bytes for n={n} (needs {16 * n})")
    ids = np.frombuffer(payload[:8 * n], np.int64)
    prios = np.frombuffer(payload[8 * n:], np.float64)
    return Reply({"updated": table.update_priorities(ids, prios)})


@OPS.op("replay.info")
def info(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply(_service(w).table(h.get("table")).stats())


@OPS.op("replay.list")
def list_tables(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    service = _service(w)
    with service.lock:
        tables = list(service.tables.values())
    return Reply({"tables": [t.stats() for t in tables]})


@OPS.op("replay.snapshot")
def snapshot_op(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """Writes the table's rows to L2 in the background; ``replay.info``'s ``snapshot_rows_left``
    counts down to None when done (then ``durable_pending_chunks`` to 0)."""
    return Reply({"started": _service(w).snapshot(arg(h, "table", str))})


@OPS.op("replay.drop")
def drop(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    return Reply({"dropped": _service(w).drop(arg(h, "table", str))})
