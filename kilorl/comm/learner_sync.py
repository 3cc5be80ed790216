"""The learner's gradient communication, built from kilorl.comm's parts.

Implements the learner-side contract (``prepare``, ``no_sync``, ``synchronize(params)``,
``average_scalars``, ``sum_tensor``, ``stats``; docs/architecture.md, "Contracts") by duck
typing: comm sits below the RL side and cannot import the abstract class, so the roles
layer subclasses both (``class BucketedComm(LearnerSync, GradientComm)``) or uses it as is.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from kilorl.comm.collectives import GradientAllReducer
from kilorl.comm.config import CompressionConfig
from kilorl.comm.hooks import CommStats
from kilorl.comm.sync import BucketedAllReduce


class LearnerSync:
    """Bucketed (optionally overlapped, optionally compressed) gradient averaging for one learner rank."""

    def __init__(
        self,
        world_size: int,
        compression: CompressionConfig | None = None,
        bucket_cap_mb: float = 25.0,
        overlap_compute_comm: bool = True,
        process_group: dist.ProcessGroup | None = None,
    ) -> None:
        self.world_size = world_size
        self.compression = compression or CompressionConfig()
        self.bucket_cap_mb = bucket_cap_mb
        self.overlap_compute_comm = overlap_compute_comm
        self.process_group = process_group
        self._reducer = GradientAllReducer(world_size)
        self._sync: BucketedAllReduce | None = None
        self._pending: list[CommStats] = []

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Start every rank from rank 0's weights and bucket ``model``'s parameters."""
        self._reducer.broadcast_module(model)
        if self.world_size > 1:
            self._sync = BucketedAllReduce(model.parameters(), self.compression, self.bucket_cap_mb, self.process_group,
                                           overlap_compute_comm=self.overlap_compute_comm)
        return model

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self._sync.no_sync() if self._sync is not None else contextlib.nullcontext()

    def synchronize(self, params: list[torch.nn.Parameter]) -> None:
        """Average the gradients of the prepared model (``params`` must be its parameters)."""
        if self.world_size == 1:
            return
        if self._sync is None:
            raise RuntimeError("LearnerSync.synchronize() before prepare(model)")
        if {id(p) for p in params if p.requires_grad} != {id(p) for p in self._sync.params}:
            raise ValueError("LearnerSync.synchronize(params): params are not the parameters given to prepare()")
        self._pending.append(self._sync.synchronize())

    def average_scalars(self, values: list[float]) -> list[float]:
        return self._reducer.average_scalars(values)

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        return self._reducer.sum_tensor(t)

    def stats(self) -> dict[str, float]:
        """comm_bytes_dense/sent/encoded, comm_ratio, compress_s, residual_norm since the last call."""
        if self.world_size == 1 or not self._pending:
            return {}
        total, self._pending = CommStats.total(self._pending), []
        return total.as_metrics()
