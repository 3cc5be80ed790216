"""A replay algorithm's table in the run's store workers (the ``replay_buffer`` section).

The learner's algorithm asks its context for storage (``LearnerContext.replay_storage``);
with the section this module answers with a ``StoreReplayStorage``: the same calls as the
in-process ``RingTable`` (insert, sample, len) over a ``ShardedTable`` whose shards are the
store workers' replay tables, the learner's own node's first. Each learner rank has its own
table (named by the run, the algorithm and the rank), as it has its own ``RingTable``.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.store.client.replay_shards import ShardedTable
from kilorl.store.replay.spec import make_spec

if TYPE_CHECKING:
    from kilorl.config import ReplayBufferConfig


class StoreReplayStorage:
    """``RingTable``'s calls on a table sharded over store workers; inserts go round robin."""

    def __init__(self, table: ShardedTable, clients: list[Any]) -> None:
        self.table, self.clients = table, clients
        self.columns = {c.name: np.dtype(c.dtype) for c in table.spec.columns}

    def insert(self, rows: Mapping[str, np.ndarray]) -> None:
        self.table.insert({k: np.asarray(v, self.columns[k]) for k, v in rows.items()})

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        return self.table.sample(batch_size).columns

    def __len__(self) -> int:
        return len(self.table)

    def stats(self) -> dict[str, float]:
        """The metric row's replay fields, all shards together (one request per shard)."""
        info = self.table.info()
        return {"replay_stored_bytes": float(info["stored_bytes"]), "replay_raw_bytes": float(info["raw_bytes"]),
                "replay_compression_ratio": float(info["compression_ratio"]),
                "replay_inserted_rows": float(info["inserted_rows"]), "replay_sampled_rows": float(info["sampled_rows"]),
                "replay_blocked_insert_s": float(info["blocked_insert_s"]),
                "replay_blocked_sample_s": float(info["blocked_sample_s"]),
                "replay_shards": float(len(info["shards"]))}

    def close(self) -> None:
        self.table.close()
        for c in self.clients:
            c.close()


def shard_clients(connect: Any, section: ReplayBufferConfig) -> list[Any]:
    """Clients of the workers that hold shards: this node's first, then the mesh's others."""
    own = connect()
    clients = [own]
    if section.sharding:
        token = getattr(connect, "token", None)
        from kilorl.store import StoreClient

        seen = {_identity(own)}
        for address in own.members:  # the mesh's members, each worker once whatever its address
            if address == own.address:
                continue
            c = StoreClient(address, token=token)
            if _identity(c) in seen:
                c.close()
                continue
            seen.add(_identity(c))
            clients.append(c)
    limit = section.shards if section.shards is not None else (len(clients) if section.sharding else 1)
    for c in clients[limit:]:
        c.close()
    return clients[:limit]


def _identity(client: Any) -> tuple[Any, Any]:
    return client.info.get("host_id"), client.info.get("pid")


def store_replay_factory(connect: Any, section: ReplayBufferConfig, run_id: str | None = None) -> Any:
    """``LearnerContext.replay_storage`` for a run with a ``replay_buffer`` section."""
    run = run_id or secrets.token_hex(4)

    def make(name: str, schema: Mapping[str, tuple[tuple[int, ...], Any]], capacity: int,
             seed: int) -> StoreReplayStorage:
        clients = shard_clients(connect, section)
        spec = make_spec(f"{run}/{name}", dict(schema), section.capacity or capacity,
                         compression=section.compression, compression_level=section.compression_level,
                         chunk_length=section.chunk_length, seed=seed)
        return StoreReplayStorage(ShardedTable([c.replay_tables for c in clients], spec, seed=seed), clients)

    return make
