"""The learner's gradient communication: ``kilorl.core.GradientComm`` over ``kilorl.comm``.

Several learners use ``BucketedComm``: bucketed averaging (overlapped with backward when
``train.overlap_compute_comm``; compressed as the ``compression`` section says). One
learner uses ``AllReduceComm``, whose every call is a no-op at world size 1. Algorithms and
the trainer only see the contract (docs/architecture.md, "Contracts").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from kilorl.comm import GradientAllReducer
from kilorl.comm.learner_sync import LearnerSync
from kilorl.core import GradientComm

if TYPE_CHECKING:
    from kilorl.config import Config


class AllReduceComm(GradientComm):
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


class BucketedComm(LearnerSync, GradientComm):
    """``kilorl.comm.LearnerSync`` under the learner's contract (comm cannot import the contract)."""


def make_grad_comm(cfg: Config, world_size: int) -> GradientComm:
    """The gradient communication a learner rank of a ``world_size`` group uses under ``cfg``."""
    if world_size == 1:
        return AllReduceComm(1)
    return BucketedComm(world_size, cfg.compression, overlap_compute_comm=cfg.train.overlap_compute_comm)
