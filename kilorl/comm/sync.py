"""Bucketed gradient synchronisation without DDP: call :meth:`BucketedAllReduce.synchronize` after backward.

For learners whose loss does not go through one ``module.forward`` (DDP only sees
``forward``), and for the ``overlap_compute_comm: false`` mode of :class:`DistributedModel`.
Gradients accumulate in ``.grad`` across backward passes as usual; flat buckets (last
parameters first, as DDP orders them) go through the configured communication hook,
all in flight together, and ``synchronize`` writes the averages back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from kilorl.comm.config import CompressionConfig
from kilorl.comm.hooks import CommHook, CommStats, make_comm_hook


class FlatBucket:
    """Duck-typed ``dist.GradBucket`` over a flat buffer, so torch's hooks (PowerSGD) accept it."""

    def __init__(self, index: int, buffer: torch.Tensor, params: list[torch.nn.Parameter], is_last: bool) -> None:
        self._index, self._buffer, self._params, self._is_last = index, buffer, params, is_last

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    def is_last(self) -> bool:
        return self._is_last

    def parameters(self) -> list[torch.nn.Parameter]:
        return self._params

    def gradients(self) -> list[torch.Tensor]:
        """Views into the buffer shaped like the parameters (writes go to the buffer)."""
        views, offset = [], 0
        for p in self._params:
            views.append(self._buffer[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return views


def bucket_parameters(params: list[torch.nn.Parameter], cap_bytes: int) -> list[list[torch.nn.Parameter]]:
    """Split parameters, last first, into buckets of at most ``cap_bytes`` (one oversize tensor
    gets a bucket of its own)."""
    buckets: list[list[torch.nn.Parameter]] = []
    current: list[torch.nn.Parameter] = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > cap_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


class BucketedAllReduce:
    """Averages (and optionally compresses) the gradients of ``params`` across a process group.

    ``overlap_compute_comm=True`` launches each bucket from a post-accumulate-grad hook as
    soon as backward has produced all of its gradients (in bucket order, as DDP does), so
    this path overlaps too, whatever the learner calls instead of ``forward``; ``False``
    launches every bucket in :meth:`synchronize`. Either way ``synchronize`` waits and
    writes the averages back.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        compression: CompressionConfig | None = None,
        bucket_cap_mb: float = 25.0,
        process_group: dist.ProcessGroup | None = None,
        hook: CommHook | None = None,
        overlap_compute_comm: bool = False,
    ) -> None:
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        self.params = [p for p in params if p.requires_grad]
        self.buckets = bucket_parameters(self.params, int(bucket_cap_mb * 2**20))
        self.process_group = process_group
        self.hook = hook or make_comm_hook(compression, process_group)
        self.overlap_compute_comm = overlap_compute_comm
        self._accumulating = False
        self._bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self._ready = [0] * len(self.buckets)
        self._next = 0  # buckets below this index are launched for the current update
        self._in_flight: list[tuple[list[torch.nn.Parameter], torch.futures.Future]] = []
        self._handles = []
        if overlap_compute_comm and self.world_size > 1:
            self._handles = [p.register_post_accumulate_grad_hook(self._on_grad_ready) for p in self.params]

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.process_group) if dist.is_initialized() else 1

    @property
    def launched_buckets(self) -> int:
        """Buckets of the current update already handed to the network (overlap: during backward)."""
        return self._next

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside only accumulate; ``synchronize`` is refused inside."""
        previous, self._accumulating = self._accumulating, True
        try:
            yield
        finally:
            self._accumulating = previous

    def close(self) -> None:
        """Remove the gradient hooks (overlap mode)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _on_grad_ready(self, p: torch.nn.Parameter) -> None:
        if self._accumulating:
            return
        i = self._bucket_of[id(p)]
        if i < self._next:
            raise RuntimeError("a second backward before BucketedAllReduce.synchronize(): accumulate under no_sync(), "
                               "then call synchronize() after the last backward")
        self._ready[i] += 1
        while self._next < len(self.buckets) and self._ready[self._next] >= len(self.buckets[self._next]):
            self._launch(self._next)

    def _launch(self, i: int) -> None:
        params = self.buckets[i]
        flat = torch.cat([self._grad(p).reshape(-1) for p in params])
        fut = self.hook.communicate(FlatBucket(i, flat, params, is_last=i == len(self.buckets) - 1))
        if self.hook.sequential:
            fut.wait()
        self._in_flight.append((params, fut))
        self._next = i + 1

    def synchronize(self) -> CommStats:
        """Average the accumulated gradients over all workers; returns this update's statistics."""
        if self._accumulating:
            raise RuntimeError("BucketedAllReduce.synchronize() called inside no_sync(); call it after the last backward")
        if self.world_size == 1:  # nothing to exchange; a missing grad stays missing
            return CommStats(comm_bytes_dense=4 * sum(p.numel() for p in self.params))
        while self._next < len(self.buckets):  # the rest (all of them without overlap; unused parameters)
            self._launch(self._next)
        for params, fut in self._in_flight:
            averaged = fut.wait()
            offset = 0
            for p in params:
                p.grad.copy_(averaged[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        self._in_flight, self._ready, self._next = [], [0] * len(self.buckets), 0
        return self.hook.pop_stats()

    @staticmethod
    def _grad(p: torch.nn.Parameter) -> torch.Tensor:
        """A parameter without a gradient this update contributes zeros (other workers may have one)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad
