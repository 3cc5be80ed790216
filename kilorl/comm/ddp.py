"""A module under ``DistributedDataParallel`` with the learner's two synchronisation modes.

``overlap_compute_comm=True``: plain DDP. Gradients are bucketed and each bucket is
all-reduced (through the compression hook) as soon as backward has produced it, so
communication of the last layers overlaps backward through the first ones.

``overlap_compute_comm=False``: every forward runs under DDP's ``no_sync`` and
:meth:`DistributedModel.synchronize` all-reduces the same-sized buckets after backward
(:class:`BucketedAllReduce`, same hook). Same arithmetic, no overlap: the baseline the overlap
is measured against, and a mode that keeps communication out of the backward pass.

Usage, with gradient accumulation over micro-batches::

    model = DistributedModel(net, compression=cfg, overlap_compute_comm=True)
    for mb in micro_batches[:-1]:
        with model.no_sync():
            loss_fn(model(mb)).backward()       # accumulate only
    loss_fn(model(micro_batches[-1])).backward()  # overlap mode: buckets reduce here
    stats = model.synchronize()                 # no-overlap mode: buckets reduce here
    optimizer.step()

DDP only sees ``forward``: the loss must be computed from ``model(...)``'s output.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from kilorl.comm.config import CompressionConfig
from kilorl.comm.hooks import CommStats, make_comm_hook, run_comm_hook
from kilorl.comm.sync import BucketedAllReduce


class DistributedModel:
    """DDP around ``module``; forward with ``model(...)``, then ``synchronize()`` after backward."""

    def __init__(
        self,
        module: torch.nn.Module,
        *,
        compression: CompressionConfig | None = None,
        bucket_cap_mb: float = 25.0,
        overlap_compute_comm: bool = True,
        process_group: dist.ProcessGroup | None = None,
        device_ids: list[int] | None = None,
        find_unused_parameters: bool = False,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("DistributedModel needs an initialised process group (kilorl.comm.init_process_group)")
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        self.overlap_compute_comm = overlap_compute_comm
        self.ddp = DistributedDataParallel(
            module, device_ids=device_ids, process_group=process_group, bucket_cap_mb=bucket_cap_mb,
            find_unused_parameters=find_unused_parameters,
        )
        self._accumulating = False
        self._grad_sync: BucketedAllReduce | None = None
        if overlap_compute_comm:
            self.hook = make_comm_hook(compression, process_group, under_ddp=True)
            self.ddp.register_comm_hook(self.hook, run_comm_hook)
        else:
            self._grad_sync = BucketedAllReduce(module.parameters(), compression, bucket_cap_mb, process_group)
            self.hook = self._grad_sync.hook

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped module (for optimizers, state dicts, and calls that need no gradients)."""
        return self.ddp.module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.overlap_compute_comm and not self._accumulating:
            return self.ddp(*args, **kwargs)
        with self.ddp.no_sync():
            return self.ddp(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forward passes inside only accumulate gradients; the next one outside synchronises."""
        previous, self._accumulating = self._accumulating, True
        try:
            yield
        finally:
            self._accumulating = previous

    def synchronize(self) -> CommStats:
        """Finish this update's gradient exchange; returns its statistics.

        Overlap mode: DDP already reduced the buckets during backward, this only collects the
        statistics. No-overlap mode: the all-reduce happens here."""
        if self._accumulating:
            raise RuntimeError("DistributedModel.synchronize() called inside no_sync(); call it after the last backward")
        if self._grad_sync is not None:
            return self._grad_sync.synchronize()
        return self.hook.pop_stats()
