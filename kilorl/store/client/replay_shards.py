"""One logical replay table spread over several workers' tables of the same name.

Inserts go to one shard (the caller's own node's, or round robin); a sample of B rows is
split over the shards in proportion to what each holds (rows, or priority mass for a
prioritized table), the shards are asked at once, and each row's probability is its
shard's share times its probability within the shard, so importance weights stay right.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from kilorl.store.client.replay import ReplayTables, SampleBatch
from kilorl.store.errors import InvalidRequest, StoreTimeout
from kilorl.store.replay.spec import TableSpec


class ShardedTable:
    """``spec`` made on every shard (capacity split evenly, seeds apart)."""

    def __init__(self, shards: Sequence[ReplayTables], spec: TableSpec, *, home: int | None = None,
                 seed: int = 0, external_inserts: bool = False) -> None:
        """``home``: the shard every insert goes to (an actor's own node's); None: round robin.
        ``external_inserts``: other clients insert (each into its own node's shard), so the
        rate limiters' counts are read from the shards instead of counted here."""
        if not shards:
            raise InvalidRequest("shards: a sharded table needs at least one worker")
        if home is not None and not 0 <= home < len(shards):
            raise InvalidRequest(f"home: shard {home} of {len(shards)}")
        n = len(shards)
        self.spec, self.shards, self.home = spec, list(shards), home
        self.external_inserts = external_inserts
        per = -(-spec.capacity // n)
        lim = spec.limiter
        min_size = max(1, -(-lim.min_size_to_sample // n))
        for i, s in enumerate(self.shards):
            s.create(replace(spec, capacity=per, seed=spec.seed * 1000 + i,
                             limiter=replace(lim, min_size_to_sample=min_size)))
        self._min_size = min_size
        self._inserted = np.zeros(n, np.int64)
        """Rows this client inserted into each shard (the rate limiter's count on that side)."""
        self._sampled = np.zeros(n, np.int64)
        self._inserted_here = 0
        self._next = itertools.cycle(range(n))
        self._weights = np.zeros(n)
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="replay-shard") if n > 1 else None

    def insert(self, columns: Mapping[str, np.ndarray], *, priorities: np.ndarray | None = None,
               timeout: float | None = None) -> tuple[int, int]:
        """One chunk into the home shard (or the next one); returns (shard, first row id)."""
        i = self.home if self.home is not None else next(self._next)
        first = self.shards[i].insert(self.spec.name, columns, priorities=priorities, timeout=timeout)
        rows = len(next(iter(columns.values())))
        self._inserted[i] += rows
        self._inserted_here += rows
        return i, first

    def _owed(self) -> np.ndarray:
        """Rows each shard's rate limiter lets this client sample now while keeping its count at
        or above target (``samples_per_insert`` x rows inserted past ``min_size_to_sample``)."""
        spi = self.spec.limiter.samples_per_insert or 0.0
        return spi * (self._inserted - self._min_size) - self._sampled

    def sample_budget(self) -> int | None:
        """Rows the shards' rate limiters admit now; None: the table has no rate limiter. This
        client must be the table's only sampler; its only inserter too, unless
        ``external_inserts`` (then the shards' own counts are read, one request per shard)."""
        if self.spec.limiter.samples_per_insert is None:
            return None
        if self.external_inserts:
            infos = self._map(lambda s: s.info(self.spec.name), self.shards)
            self._inserted = np.array([int(i["inserted_rows"]) for i in infos], np.int64)
            self._sampled = np.array([int(i["sampled_rows"]) for i in infos], np.int64)
        return int(np.floor(np.maximum(self._owed(), 0.0).sum()))

    @property
    def inserted_here(self) -> int:
        """Rows this client inserted itself (0 for a learner whose env runners insert)."""
        return int(self._inserted_here)

    def _refresh(self) -> None:
        infos = self._map(lambda s: s.info(self.spec.name), self.shards)
        key = "priority_total" if self.spec.sampler == "prioritized" else "rows"
        self._weights = np.array([float(info[key] or 0.0) for info in infos])

    def sample(self, batch_size: int, timeout: float | None = None) -> SampleBatch:
        """``batch_size`` rows from all shards, split in proportion to their rows (priority mass)."""
        owed = np.maximum(self._owed(), 0.0) if self.spec.limiter.samples_per_insert is not None else None
        if owed is not None and owed.sum() > 0:
            # rows go where the limiters owe them, so no shard's count strays: random shares would
            # let one drift out of its tolerance and block a learner that inserts and samples alone
            counts = _apportion(batch_size, owed)
            share = counts / batch_size
        else:
            if not np.all(self._weights > 0):
                self._refresh()
            total = self._weights.sum()
            if total <= 0:  # nothing anywhere yet: wait on the first shard, as one table would
                counts = np.zeros(len(self.shards), np.int64)
                counts[0] = batch_size
                share = np.ones(len(self.shards))
            else:
                share = self._weights / total
                counts = self._rng.multinomial(batch_size, share)
        picked = [i for i in range(len(self.shards)) if counts[i]]
        try:
            got = self._map(lambda i: self.shards[i].sample(self.spec.name, int(counts[i]), timeout), picked)
        except StoreTimeout:
            self._weights[:] = 0
            raise
        for i, b in zip(picked, got, strict=True):
            self._weights[i] = b.total if self.spec.sampler == "prioritized" else b.size
            self._sampled[i] += b.ids.size
        cols = {c.name: np.concatenate([b.columns[c.name] for b in got]) for c in self.spec.columns}
        probs = np.concatenate([b.probabilities * share[i] for i, b in zip(picked, got, strict=True)])
        shard_of = np.concatenate([np.full(b.ids.size, i, np.int64) for i, b in zip(picked, got, strict=True)])
        return SampleBatch(cols, np.concatenate([b.ids for b in got]), probs, sum(b.size for b in got), shard_of)

    def update_priorities(self, shards: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        """New priorities of sampled rows, each sent to its shard; returns how many were set."""
        shards, ids, prios = np.asarray(shards), np.asarray(ids), np.asarray(priorities)
        todo = [i for i in range(len(self.shards)) if np.any(shards == i)]
        done = self._map(lambda i: self.shards[i].update_priorities(self.spec.name, ids[shards == i],
                                                                   prios[shards == i]), todo)
        return int(sum(done))

    def info(self) -> dict[str, Any]:
        """Every shard's stats, and their sums."""
        infos = self._map(lambda s: s.info(self.spec.name), self.shards)
        summed = {k: sum(i[k] for i in infos) for k in ("rows", "inserted_rows", "sampled_rows", "stored_bytes",
                                                        "raw_bytes", "blocked_insert_s", "blocked_sample_s")}
        summed["compression_ratio"] = summed["raw_bytes"] / summed["stored_bytes"] if summed["stored_bytes"] else 1.0
        return {**summed, "shards": infos}

    def __len__(self) -> int:
        return int(self.info()["rows"])

    def _map(self, fn: Any, items: Any) -> list[Any]:
        """``fn`` over ``items``, the shards' requests in flight at once."""
        items = list(items)
        if self._pool is None or len(items) <= 1:
            return [fn(i) for i in items]
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """``total`` split in proportion to ``weights`` (largest remainders get the leftovers)."""
    exact = total * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    if left:
        counts[np.argsort(counts - exact, kind="stable")[:left]] += 1
    return counts
