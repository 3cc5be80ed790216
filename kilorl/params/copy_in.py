"""A reader's copy of each version into the same tensors, worked out once (``fetch_into``).

An actor copies every version into the model it keeps. The general assembly
(``ReadPlan.assemble_segments``) sorts the read's buffers, looks up which buffer holds each
tensor and checks each destination, every time: for a 5-tensor policy that is most of the
reader's Python per version. A ``CopyIn`` does that once, for one plan and one set of
destination tensors, as a list of byte runs (destination bytes, buffer, offsets, length);
a later version with the same plan and the same tensors is only those copies. Measured on
the 2-core VM, 10K parameters, 4 actors (``benchmarks/param_sync_bench.py --runs 6``):
publish -> in every actor's model, p50 0.43 ms copied in against 0.54 ms as new views
(``docs/benchmarks.md``, "Readers copy into the model they keep").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.store.client.board_reads import CopyInto

if TYPE_CHECKING:
    import torch

    from kilorl.params.store_reads import CachedPlan


class CopyIn:
    """The byte runs that put a read of ``cached`` into the tensors ``out`` held when made."""

    def __init__(self, cached: CachedPlan, count: int, dests: list[tuple[str, Any, int, Any]],
                 runs: list[tuple[np.ndarray, int, int, int, int]]) -> None:
        self.cached = cached
        self.count = count
        """How many buffers a read of this plan returns."""
        self.dests = dests
        """(name, tensor, storage address, shape) of every destination, as checked when made."""
        self.runs = runs
        """(destination bytes, buffer index, buffer offset, length, destination offset)."""
        self._board: CopyInto | None | bool = False
        """The same runs as a copy straight out of the worker's arena (``on_board``), made once."""

    @classmethod
    def make(cls, cached: CachedPlan, segments: Sequence[tuple[int, Any]],
             out: Mapping[str, torch.Tensor]) -> CopyIn | None:
        """The runs for this read, or None when the general assembly must do it (a tensor the
        read does not cover whole, a strided slice, a destination missing from ``out``).
        A destination of the wrong shape or dtype raises ``LayoutError``."""
        plan = cached.plan
        order = sorted(range(len(segments)), key=lambda i: segments[i][0])
        starts = [int(segments[i][0]) for i in order]
        sizes = [memoryview(segments[i][1]).nbytes for i in order]
        dests, runs = [], []
        for p in plan.pieces:
            dest = out.get(p.name)
            if dest is None or (p.outer != 1 and p.stride != p.run_len):
                return None
            view = plan.destination_bytes(p, dest)
            dests.append((p.name, dest, dest.data_ptr(), dest.shape))
            at, n, done = p.start, p.outer * p.run_len, 0
            k = bisect.bisect_right(starts, at) - 1
            while done < n:
                if k < 0 or k >= len(starts) or not starts[k] <= at < starts[k] + sizes[k]:
                    return None
                take = min(n - done, starts[k] + sizes[k] - at)
                runs.append((view, order[k], at - starts[k], take, done))
                done, at, k = done + take, at + take, k + 1
        return cls(cached, len(segments), dests, runs)

    def fits(self, cached: CachedPlan, segments: Sequence[tuple[int, Any]], out: Mapping[str, torch.Tensor]) -> bool:
        """Whether this read is of the same plan into the same tensors, unmoved and unresized."""
        return cached is self.cached and len(segments) == self.count and self.holds(out)

    def holds(self, out: Mapping[str, torch.Tensor]) -> bool:
        """Whether ``out`` still has the tensors this was made for, unmoved and unresized."""
        return all(out.get(name) is dest and dest.data_ptr() == ptr and dest.shape == shape
                   for name, dest, ptr, shape in self.dests)

    def on_board(self, name: str) -> tuple[list[tuple[str, Any]], CopyInto] | None:
        """The reads of ``name`` and the copier that put them straight from the worker's arena
        into the destinations (``StoreClient.read_into``); None for a plan of several requests."""
        if self._board is False:
            self._board = None
            batches = self.cached.batches
            if len(batches) == 1 and batches[0]:
                where = [(r, off) for r, (_, ranges) in enumerate(batches[0], start=1) for off, _ in ranges]
                runs = [(where[i][0], where[i][1] + at, view, to, n) for view, i, at, n, to in self.runs]
                self._board = CopyInto(self.cached.record, runs)
        if self._board is None:
            return None
        return self.cached.reads(name, 0), self._board

    def apply(self, segments: Sequence[tuple[int, Any]]) -> None:
        for view, i, at, n, to in self.runs:
            view[to:to + n] = np.frombuffer(segments[i][1], np.uint8, n, at)
