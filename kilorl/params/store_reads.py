"""How a reader turns a version of the store's parameters into tensors in as few requests as possible.

A version is ``{name}/layout`` (the commit record, the writer's ``FlatLayout`` as JSON) and
``{name}/shard/{k}`` (raw bytes ``[bounds[k], bounds[k+1])`` of the flat vector). One
``get_versions`` request reads the commit record and, at the same version number, exactly
the byte ranges of the shards the reader's layout needs (``kilorl.params.resharding``).

The ranges come from the writer's layout, which a reader only knows once it has read the
commit record; layouts rarely change between versions, so a reader plans with the layout of
the version it read last (``CachedPlan``) and checks the commit record that comes back with
the bytes: the same record means the ranges were right (one round trip, the common case);
another means one more request with the new plan at that version. With ``min_version`` the
same request first waits for the version, so a wake-up brings the bytes with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kilorl.params.layout import FlatLayout, Full, ReaderLayout
from kilorl.params.resharding import ReadPlan, plan_read
from kilorl.store.errors import InvalidRequest

if TYPE_CHECKING:
    import torch

MAX_RANGES = 1024
"""Byte ranges per request: the request header (msgpack, limited to 64 KiB) must stay small."""


def layout_key(name: str) -> str:
    return f"{name}/layout"


def shard_key(name: str, shard: int) -> str:
    return f"{name}/shard/{shard}"


@dataclass
class CachedPlan:
    """A reader layout planned against one writer layout (the commit record it came from)."""

    record: bytes
    writer: FlatLayout
    plan: ReadPlan
    batches: list[list[tuple[int, list[tuple[int, int]]]]] = field(default_factory=list)
    """Per request: ``(shard, ranges)`` pairs, at most ``MAX_RANGES`` ranges in all."""
    _reads: dict[tuple[str, int, bool], list[tuple[str, list[tuple[int, int]] | None]]] = field(
        default_factory=dict, repr=False, compare=False)
    """``reads`` worked out once per name and request (every wait of a reader asks again)."""

    @classmethod
    def make(cls, record: bytes, reader: ReaderLayout | None, max_gap: int) -> CachedPlan:
        writer = FlatLayout.from_json(json.loads(record))
        plan = plan_read(writer, reader, max_gap)
        batches: list[list[tuple[int, list[tuple[int, int]]]]] = [[]]
        count = 0
        for shard, ranges in sorted(plan.ranges_by_shard().items()):
            for i in range(0, len(ranges), MAX_RANGES):
                part = ranges[i:i + MAX_RANGES]
                if count + len(part) > MAX_RANGES and batches[-1]:
                    batches.append([])
                    count = 0
                batches[-1].append((shard, part))
                count += len(part)
        return cls(record, writer, plan, batches)

    def reads(self, name: str, batch: int, record: bool = True) -> list[tuple[str, list[tuple[int, int]] | None]]:
        """The ``get_versions`` reads of request ``batch``; with ``record`` the commit record
        first (the anchor; a request at a known version needs none). Callers must not change it."""
        got = self._reads.get((name, batch, record))
        if got is None:
            shards = [(shard_key(name, k), r) for k, r in self.batches[batch]]
            got = [(layout_key(name), None), *shards] if record or not shards else shards
            if len(self._reads) < 64:
                self._reads[(name, batch, record)] = got
        return got

    def segments(self, batch: int, values: Sequence[Any], record: bool = True) -> list[tuple[int, Any]]:
        """``(flat_offset, buffer)`` of every range a request of ``batch`` returned."""
        out = []
        values = values[1:] if record or not self.batches[batch] else values
        for (shard, ranges), buffers in zip(self.batches[batch], values):
            base = self.writer.bounds[shard]
            out += [(base + off, buf) for (off, _), buf in zip(ranges, buffers)]
        return out


@dataclass
class Prefetched:
    """A version a ``wait`` already read, kept for the fetch that follows it."""

    name: str
    plan_key: tuple
    version: int
    cached: CachedPlan
    segments: list[tuple[int, Any]]


def plan_key(reader: ReaderLayout | None) -> tuple:
    """A hashable key of a reader layout (``None``: every tensor, whole)."""
    return ("*",) if reader is None else tuple(reader.items())


class VersionReads:
    """One thread's reads of versioned parameters through one ``StoreClient``."""

    def __init__(self, client: Any, plans: dict[tuple[str, tuple], CachedPlan], max_gap: int) -> None:
        self.client = client
        self.plans = plans
        self.max_gap = max_gap

    def read(self, name: str, reader: ReaderLayout | None, version: int | None, min_version: int | None = None,
             timeout: float | None = None, key: tuple | None = None) -> tuple[int, CachedPlan, list[tuple[int, Any]]]:
        """``(version, plan, segments)``: the reader's bytes of one consistent version
        (``key``: ``plan_key(reader)``, when the caller has it)."""
        key = (name, plan_key(reader) if key is None else key)
        cached = self.plans.get(key)
        if cached is not None:
            try:
                got = self.client.get_versions(cached.reads(name, 0), version, min_version, timeout)
            except InvalidRequest:  # ranges outside the shards: the layout shrank since
                self.plans.pop(key, None)
                cached = None
        if cached is None:
            got = self.client.get_versions([(layout_key(name), None)], version, min_version, timeout)
            return self._read_planned(name, key, reader, got.version, bytes(got.value[0]))
        record = bytes(got.value[0])
        if record != cached.record:  # the writer's layout changed: plan again, read that version
            return self._read_planned(name, key, reader, got.version, record)
        segments = cached.segments(0, got.value)
        return got.version, cached, segments + self._rest(name, cached, got.version)

    def _read_planned(self, name: str, key: tuple[str, tuple], reader: ReaderLayout | None, version: int,
                      record: bytes) -> tuple[int, CachedPlan, list[tuple[int, Any]]]:
        cached = CachedPlan.make(record, reader, self.max_gap)
        if len(self.plans) > 64:
            self.plans.clear()
        self.plans[key] = cached
        got = self.client.get_versions(cached.reads(name, 0, record=False), version)
        return version, cached, cached.segments(0, got.value, record=False) + self._rest(name, cached, version)

    def _rest(self, name: str, cached: CachedPlan, version: int) -> list[tuple[int, Any]]:
        """Requests 1.. of a plan with more ranges than one request carries."""
        out: list[tuple[int, Any]] = []
        for batch in range(1, len(cached.batches)):
            got = self.client.get_versions(cached.reads(name, batch, record=False), version)
            out += cached.segments(batch, got.value, record=False)
        return out


def assemble(cached: CachedPlan, segments: list[tuple[int, Any]],
             out: Mapping[str, torch.Tensor] | None, share: bool = False) -> dict[str, torch.Tensor]:
    """The reader's tensors (copied once, from the store's buffers, into ``out`` when given;
    with ``share``, views of the buffers where a tensor lies whole in one). Parameters in
    ``out`` are written through detached views of their bytes: autograd records nothing."""
    return cached.plan.assemble_segments(segments, out, share)


def reader_layout(layout: ReaderLayout | Sequence[str] | None) -> ReaderLayout | None:
    """A reader layout from a layout, a list of tensor names (each whole) or None (everything)."""
    if layout is None or isinstance(layout, Mapping):
        return layout
    return {k: _FULL for k in layout}


_FULL = Full()
"""One instance for every whole tensor: plan keys then compare by identity, not ``__eq__``."""
