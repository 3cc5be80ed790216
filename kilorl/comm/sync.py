"""Bucketed gradient synchronisation without DDP: call :meth:`GradientSync.synchronize` after backward.

For learners whose loss does not go through one ``module.forward`` (DDP only sees
``forward``), and for the ``overlap_compute_comm: false`` mode of :class:`DistributedModel`.
Gradients accumulate in ``.grad`` across backward passes as usual; ``synchronize`` packs
them into flat buckets (last parameters first, as DDP orders them), runs the configured
communication hook on each (all buckets in flight together) and writes the averages back.
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


class GradientSync:
    """Averages (and optionally compresses) the gradients of ``params`` across a process group."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        compression: CompressionConfig | None = None,
        bucket_cap_mb: float = 25.0,
        process_group: dist.ProcessGroup | None = None,
        hook: CommHook | None = None,
    ) -> None:
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        self.params = [p for p in params if p.requires_grad]
        self.buckets = bucket_parameters(self.params, int(bucket_cap_mb * 2**20))
        self.process_group = process_group
        self.hook = hook or make_comm_hook(compression, process_group)
        self._accumulating = False

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.process_group) if dist.is_initialized() else 1

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Mark backward passes that only accumulate; ``synchronize`` is refused inside."""
        previous, self._accumulating = self._accumulating, True
        try:
            yield
        finally:
            self._accumulating = previous

    def synchronize(self) -> CommStats:
        """Average the accumulated gradients over all workers; returns this update's statistics."""
        if self._accumulating:
            raise RuntimeError("GradientSync.synchronize() called inside no_sync(); call it after the last backward")
        if self.world_size == 1:  # nothing to exchange; a missing grad stays missing
            return CommStats(comm_bytes_dense=4 * sum(p.numel() for p in self.params))
        in_flight = []
        for i, params in enumerate(self.buckets):
            flat = torch.cat([self._grad(p).reshape(-1) for p in params])
            bucket = FlatBucket(i, flat, params, is_last=i == len(self.buckets) - 1)
            fut = self.hook.communicate(bucket)
            if self.hook.sequential:
                fut.wait()
            in_flight.append((params, fut))
        for params, fut in in_flight:
            averaged = fut.wait()
            offset = 0
            for p in params:
                p.grad.copy_(averaged[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        return self.hook.pop_stats()

    @staticmethod
    def _grad(p: torch.nn.Parameter) -> torch.Tensor:
        """A parameter without a gradient this update contributes zeros (other workers may have one)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad
