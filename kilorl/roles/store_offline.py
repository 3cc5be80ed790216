"""Recorded rows (``replay_buffer.offline``) in a table of their own on the run's store workers.

With a ``replay_buffer`` section on the store (``backend: store``), the learner loads its
dataset's rows at start-up, before any env runner steps, into a table that holds exactly
those rows: its capacity is the dataset's row count, split over the shards so each shard's
slice fits its part, and nothing else ever inserts into it, so online inserts (another
table) never evict a recorded row however often they wrap. The table is named after the run,
the learner rank and a digest of the rows: a resumed run (``durable``) or a second learner
built in the same run finds it full and loads nothing; a table left half loaded (a crash
mid-load) is dropped and loaded again. Batches draw their recorded rows from the workers
(the learner still holds the columns it read, ``LearnerContext.offline``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.algos.api import OfflineStorageFactory
from kilorl.roles.store_replay import shard_clients
from kilorl.store.client.replay_shards import ShardedTable
from kilorl.store.replay.spec import TableSpec, make_spec

if TYPE_CHECKING:
    from kilorl.config import ReplayBufferConfig

INSERT_BYTES = 32 << 20
"""Bytes of rows per insert request while loading (a large dataset goes in several)."""



def offline_scope(prefix: str, rank: int) -> str:
    """Where learner ``rank``'s recorded rows are named: beside, not under, its online tables'
    scope (``learner_scope``), which an env runner expects to hold exactly one table."""
    return f"{prefix}/offline{rank}"


def rows_digest(rows: Mapping[str, np.ndarray]) -> str:
    """A short digest of the rows' columns, names, shapes and bytes: another dataset gets another table."""
    h = hashlib.sha1()
    for name in sorted(rows):
        a = np.ascontiguousarray(rows[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()[:12]


def shard_slices(rows: int, shards: int) -> list[slice]:
    """Each shard's contiguous slice of ``rows``: ``ceil(rows / shards)`` rows each, as
    ``ShardedTable`` splits the capacity, so no shard holds more rows than it keeps."""
    per = -(-rows // shards)
    return [slice(i * per, min(rows, (i + 1) * per)) for i in range(shards)]


class StoreOfflineTable:
    """The recorded rows' table: sampled uniformly with replacement over all shards; no insert."""

    def __init__(self, table: ShardedTable, clients: list[Any], loaded_rows: int) -> None:
        self.table, self.clients = table, clients
        self.loaded_rows = loaded_rows
        """Rows this table's creator inserted (0: it found them already loaded)."""

    @property
    def name(self) -> str:
        return self.table.spec.name

    def __len__(self) -> int:
        """The table's capacity: it holds exactly the dataset once loaded and nothing changes it
        (no request to the workers, which a learner would otherwise send every update)."""
        return self.table.spec.capacity

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        return self.table.sample(batch_size).columns

    def rng_state(self) -> None:
        """None: the workers' samplers keep their own place (a resumed run draws afresh)."""
        return None

    def set_rng_state(self, state: Any) -> None:
        """Nothing to restore (see ``rng_state``)."""

    def close(self) -> None:
        self.table.close()
        for c in self.clients:
            c.close()


def _loaded(table: ShardedTable, slices: list[slice]) -> str:
    """``full`` (every shard holds its slice), ``empty``, or ``partial``."""
    rows = [int(table.shards[i].info(table.spec.name)["rows"]) for i in range(len(slices))]
    if all(r == s.stop - s.start for r, s in zip(rows, slices, strict=True)):
        return "full"
    return "empty" if not any(rows) else "partial"


def _insert(table: ShardedTable, rows: Mapping[str, np.ndarray], slices: list[slice]) -> int:
    """Each shard's slice into that shard, in requests of about ``INSERT_BYTES``."""
    spec = table.spec
    step = max(spec.chunk_length, INSERT_BYTES // max(1, spec.row_nbytes) // spec.chunk_length * spec.chunk_length)
    for shard, part in zip(table.shards, slices, strict=True):
        for start in range(part.start, part.stop, step):
            stop = min(part.stop, start + step)
            shard.insert(spec.name, {c.name: np.asarray(rows[c.name][start:stop], c.dtype) for c in spec.columns})
    return slices[-1].stop if slices else 0


def load_offline_table(clients: list[Any], spec: TableSpec, rows: Mapping[str, np.ndarray]) -> StoreOfflineTable:
    """``spec``'s table on ``clients``' workers holding exactly ``rows`` (loaded unless found full)."""
    shards = [c.replay_tables for c in clients]
    slices = shard_slices(spec.capacity, len(shards))
    table = ShardedTable(shards, spec, seed=spec.seed)
    state = _loaded(table, slices)
    if state == "partial":  # a load cut short: start over, so no row is there twice
        table.close()
        for s in shards:
            s.drop(spec.name)
        table = ShardedTable(shards, spec, seed=spec.seed)
    loaded = 0 if state == "full" else _insert(table, rows, slices)
    return StoreOfflineTable(table, clients, loaded)


def store_offline_factory(connect: Any, section: ReplayBufferConfig, scope: str) -> OfflineStorageFactory:
    """``LearnerContext.offline_storage`` for a run whose ``replay_buffer`` is on the store:
    tables named ``<scope>/<name>-<digest>``, coded and made durable as the section says,
    with no rate limiter (the online table's limiter paces the learner)."""

    def make(name: str, rows: Mapping[str, np.ndarray], seed: int) -> StoreOfflineTable:
        n = len(next(iter(rows.values())))
        if n == 0:
            raise ValueError("replay_buffer.offline: the dataset holds no row")
        clients = shard_clients(connect, section)
        for c in clients[max(1, min(len(clients), n)):]:  # never more shards than rows: none stays empty
            c.close()
        clients = clients[:max(1, min(len(clients), n))]
        try:
            schema = {k: (np.asarray(v).shape[1:], np.asarray(v).dtype) for k, v in rows.items()}
            spec = make_spec(f"{scope}/{name}-{rows_digest(rows)}", schema, n, compression=section.compression,
                             compression_level=section.compression_level, chunk_length=section.chunk_length,
                             seed=seed, durable=section.durable)
            return load_offline_table(clients, spec, rows)
        except BaseException:
            for c in clients:
                c.close()
            raise

    return make
