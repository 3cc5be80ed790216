"""A replay algorithm's table in the run's store workers (the ``replay_buffer`` section).

The learner's algorithm asks its context for storage (``LearnerContext.replay_storage``);
with the section this module answers with a ``StoreReplayStorage``: the same calls as the
in-process ``RingTable`` (insert, sample, len) over a ``ShardedTable`` whose shards are the
store workers' replay tables, the learner's own node's first. Each learner rank has its own
table (named by the run, the rank and the algorithm), as it has its own ``RingTable``.

With one shard per store worker (``sharding: true``, no ``shards`` limit) and an algorithm that
names its adder (``AlgorithmSpec.adder``), env runners insert themselves (``ActorInserts``):
env runner ``j`` turns its rollout into rows and inserts them into its own node's shard of
learner ``j % learners``'s table, and hands the learner a ``ReplayInsert`` (counts, no rows),
so rollout bytes never pass the driver or a learner. The learner then only samples.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.algos.api import SAMPLE_WEIGHT
from kilorl.store.client.replay_shards import ShardedTable
from kilorl.store.replay.spec import make_spec

if TYPE_CHECKING:
    from kilorl.config import Config, ReplayBufferConfig
    from kilorl.core import Rollout


def table_prefix(run_dir: str | Path | None) -> str:
    """The run's replay tables' name prefix: the same for the same run directory (a resumed
    run finds its durable tables again), random for a run without one."""
    if run_dir is None:
        return "run-" + secrets.token_hex(6)
    return "run-" + hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]


def learner_scope(prefix: str, rank: int) -> str:
    """Where learner ``rank``'s tables are named: ``<prefix>/learner<rank>/<the algorithm's name>``."""
    return f"{prefix}/learner{rank}"


def actors_insert(cfg: Config) -> bool:
    """Whether the run's env runners insert into their own node's shard themselves: a table on
    the store workers with one shard per worker, and an algorithm that names its adder."""
    from kilorl.algos import get as get_algorithm

    section = cfg.replay_buffer
    spec = get_algorithm(cfg.algo.name)
    return (section is not None and section.backend == "store" and section.sharding and section.shards is None
            and spec.data_path == "replay" and spec.adder is not None)


@dataclass(frozen=True)
class ReplayInsert:
    """What an env runner that inserted its rollout's rows into its node's shard hands the
    learner in place of the rollout: where they went and how many, no rows."""

    table: str
    worker: str
    """Address of the store worker (the env runner's node's) that holds the rows."""
    rows: int
    env_steps: int
    version: int | None


class ActorInserts:
    """The env runner's side: its rollouts' rows into its own node's shard of its learner's table."""

    def __init__(self, cfg: Config, client: Any, prefix: str, index: int) -> None:
        from kilorl.algos import get as get_algorithm

        self.client, self.algo = client, cfg.algo
        self.adder = get_algorithm(cfg.algo.name).load("adder")
        self.scope = learner_scope(prefix, index % cfg.parallelism.learner) + "/"
        self.table: str | None = None

    def _find(self) -> str:
        """The learner's table on this node's worker (the learner made it before any rollout)."""
        names = [t["name"] for t in self.client.replay_tables.list() if t["name"].startswith(self.scope)]
        if len(names) != 1:
            raise RuntimeError(f"replay_buffer: the store worker {self.client.address} holds "
                               f"{names or 'no'} replay table under {self.scope!r}; an env runner inserts into "
                               "exactly one (its learner's shard on this node)")
        return names[0]

    def insert(self, rollout: Rollout) -> ReplayInsert:
        """The adder's rows of ``rollout`` in one insert (blocks while the rate limiter holds inserts back)."""
        tables = self.client.replay_tables
        if self.table is None:
            self.table = self._find()
        spec = tables.spec(self.table)
        rows = self.adder(self.algo, rollout, bool(spec.stacked))
        columns = {c.name: np.asarray(rows[c.name], c.dtype) for c in spec.columns}
        tables.insert(self.table, columns)
        n = len(columns[spec.columns[0].name])
        return ReplayInsert(self.table, str(self.client.address), n, rollout.env_steps, rollout.version)


class StoreReplayStorage:
    """``RingTable``'s calls on a table sharded over store workers; inserts go round robin.

    With ``prioritized`` (the section's ``PrioritizedConfig``) a sample also carries each
    row's importance weight (``SAMPLE_WEIGHT``, at the exponent ``progress`` reaches) and
    ``update_priorities`` sets the last sample's priorities. With a rate limiter
    ``sample_budget`` says how many rows may be sampled now."""

    def __init__(self, table: ShardedTable, clients: list[Any], prioritized: Any = None) -> None:
        """``table.external_inserts``: env runners insert into it (``ActorInserts``), this learner only samples."""
        self.table, self.clients, self.prioritized = table, clients, prioritized
        self.columns = {c.name: np.dtype(c.dtype) for c in table.spec.columns}
        self.min_size_to_sample = table.spec.limiter.min_size_to_sample
        self.stacked = bool(table.spec.stacked)
        """Whether rows are frame stacks (an adder then inserts each env's steps consecutively)."""
        self.progress = 0.0
        """Share of the run's env steps done (the learner sets it): where ``beta`` stands."""
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def name(self) -> str:
        """The table's name on the store workers (a checkpoint records it)."""
        return self.table.spec.name

    def insert(self, rows: Mapping[str, np.ndarray]) -> None:
        self.table.insert({k: np.asarray(v, self.columns[k]) for k, v in rows.items()})

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        batch = self.table.sample(batch_size)
        if self.prioritized is None:
            return batch.columns
        self._last = (batch.shards if batch.shards is not None else np.zeros(batch.ids.size, np.int64), batch.ids)
        beta = self.prioritized.beta_at(self.progress)
        w = (batch.size * batch.probabilities) ** -beta
        return {**batch.columns, SAMPLE_WEIGHT: (w / w.max()).astype(np.float32)}

    def update_priorities(self, errors: np.ndarray) -> int:
        """The last sample's rows get priority ``|error| + epsilon`` (one per row, in order)."""
        if self.prioritized is None or self._last is None:
            raise ValueError("update_priorities: needs a prioritized table and a sample drawn from it")
        shards, ids = self._last
        return self.table.update_priorities(shards, ids, np.abs(np.asarray(errors, np.float64))
                                            + self.prioritized.epsilon)

    def sample_budget(self) -> int | None:
        """Rows the rate limiter admits now (None: no limiter)."""
        return self.table.sample_budget()

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
                "replay_shards": float(len(info["shards"])),
                "replay_learner_inserted_rows": float(self.table.inserted_here),
                **{f"replay_shard{i}_inserted_rows": float(s["inserted_rows"]) for i, s in enumerate(info["shards"])}}

    def close(self) -> None:
        self.table.close()
        for c in self.clients:
            c.close()


def node_workers(connect: Any) -> list[str]:
    """Addresses of the run's store workers, one per node that has one (each waited for until it
    serves), when ``connect`` is the run's ``NodeConnector``; else none (the mesh's members then)."""
    nodes = getattr(connect, "addresses", None)
    if nodes is None or not hasattr(connect, "resolve"):
        return []
    ids = sorted({*nodes, *getattr(connect, "nodes", {}), *getattr(connect, "files", {})})
    return list(dict.fromkeys(connect.resolve(n) for n in ids))


def shard_clients(connect: Any, section: ReplayBufferConfig) -> list[Any]:
    """Clients of the workers that hold shards: this node's first, then the others (every node's
    worker the run started, or the mesh's members)."""
    own = connect()
    clients = [own]
    if section.sharding:
        token = getattr(connect, "token", None)
        from kilorl.store import StoreClient

        seen = {_identity(own)}
        for address in node_workers(connect) or own.members:  # each worker once whatever its address
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


def stacked_columns(section: ReplayBufferConfig, schema: Mapping[str, tuple[tuple[int, ...], Any]]) -> tuple[str, ...]:
    """The columns ``replay_buffer.frame_stack`` applies to: rows of ``[frame_stack, frame...]``."""
    k = section.frame_stack
    if k is None:
        return ()
    names = tuple(n for n, (shape, _) in schema.items() if len(shape) >= 2 and shape[0] == k)
    if not names:
        raise ValueError(f"replay_buffer.frame_stack: {k}, but no column of the table holds [{k}, ...] stacks "
                         f"({ {n: list(shape) for n, (shape, _) in schema.items()} }); stack the env's "
                         "observations (FrameStackObservation) or remove the option")
    return names


def limiter_of(section: ReplayBufferConfig, batch_size: int, learning_starts: int = 0) -> dict[str, Any]:
    """The table's rate limiter. Its tolerance covers what a learner that samples whole batches
    leaves owed (under ``batch_size + 1`` rows) plus one row's worth of inserts, so the learner,
    inserting and sampling in one thread, is never refused on either side. With
    ``samples_per_insert`` the limiter starts counting no earlier than the algorithm's first
    sample (``learning_starts``, in rows: an env step adds at most one): a limiter that started
    sooner would block the inserts the learner waits for, and neither side would move."""
    spi = section.samples_per_insert
    tolerance = None if spi is None else spi + batch_size + 1.0
    min_size = section.min_size_to_sample or 1
    if spi is not None:
        min_size = max(min_size, learning_starts + 1)
    return {"samples_per_insert": spi, "min_size_to_sample": min_size, "tolerance": tolerance}


def store_replay_factory(connect: Any, section: ReplayBufferConfig, run_id: str | None = None,
                         batch_size: int = 1, external_inserts: bool = False, learning_starts: int = 0) -> Any:
    """``LearnerContext.replay_storage`` for a run with a ``replay_buffer`` section;
    ``run_id``: the tables' name prefix (``learner_scope``); ``batch_size``: the rows the
    algorithm samples per gradient step; ``external_inserts``: env runners insert (``ActorInserts``);
    ``learning_starts``: the algorithm's env steps before its first sample (``limiter_of``)."""
    run = run_id or secrets.token_hex(4)
    prio = section.prioritized

    def make(name: str, schema: Mapping[str, tuple[tuple[int, ...], Any]], capacity: int,
             seed: int) -> StoreReplayStorage:
        stacked = stacked_columns(section, schema)
        clients = shard_clients(connect, section)
        try:
            spec = make_spec(f"{run}/{name}", dict(schema), section.capacity or capacity,
                             compression=section.compression, compression_level=section.compression_level,
                             chunk_length=section.chunk_length, seed=seed, durable=section.durable, stacked=stacked,
                             sampler="uniform" if prio is None else "prioritized",
                             alpha=0.6 if prio is None else prio.alpha, limiter=limiter_of(section, batch_size, learning_starts))
            table = ShardedTable([c.replay_tables for c in clients], spec, seed=seed,
                                 external_inserts=external_inserts)
        except BaseException:
            for c in clients:
                c.close()
            raise
        return StoreReplayStorage(table, clients, prio)

    return make
