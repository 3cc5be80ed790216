"""The learner's gradient communication today: one flat all-reduce after backward.

Implements ``kilorl.core.GradientSync`` over ``kilorl.comm``; a DDP-with-buckets or a
compressed implementation replaces this class without touching algorithms or trainer
(docs/architecture.md, "Contracts").
"""

from __future__ import annotations

import time

import torch

from kilorl.comm import GradientAllReducer
from kilorl.core import GradientSync


class AllReduceSync(GradientSync):
    """Averages gradients with one all-reduce per optimizer step; a no-op with one rank."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._reducer = GradientAllReducer(world_size)
        self._bytes = 0
        self._seconds = 0.0

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        self._reducer.broadcast_module(model)
        return model

    def synchronize(self, params: list[torch.nn.Parameter]) -> None:
        if self.world_size == 1:
            return
        t0 = time.perf_counter()
        self._reducer.average_gradients(params)
        self._seconds += time.perf_counter() - t0
        self._bytes += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)

    def average_scalars(self, values: list[float]) -> list[float]:
        return self._reducer.average_scalars(values)

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        return self._reducer.sum_tensor(t)

    def stats(self) -> dict[str, float]:
        if self.world_size == 1:
            return {}
        out = {"comm_bytes_sent": float(self._bytes), "comm_allreduce_s": self._seconds}
        self._bytes, self._seconds = 0, 0.0
        return out
