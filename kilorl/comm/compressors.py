"""Threshold + top-k sparsification with per-worker error feedback.

Deep Gradient Compression's residual accumulation: what a worker does not send this step
(entries below the threshold, outside the top-k, and the bf16 rounding of what it does
send) stays in its residual and is added to its next gradient. So nothing is lost, only
delayed: after T steps, ``sum(sent) + residual == sum(gradients)`` exactly. Without it,
small coordinates are never applied and learning stalls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kilorl.comm.config import CompressionConfig
from kilorl.comm.encoding import VALUE_DTYPES


@dataclass(frozen=True)
class Selection:
    """What one worker sends for one flat tensor: sorted positions and wire-dtype values."""

    indices: torch.Tensor
    values: torch.Tensor
    numel: int

    def dense(self) -> torch.Tensor:
        """The fp32 tensor this selection stands for (zeros where nothing was sent)."""
        out = torch.zeros(self.numel, dtype=torch.float32, device=self.values.device)
        return out.index_put_((self.indices,), self.values.to(torch.float32))


class ThresholdTopK:
    """Selects entries of flat gradients; keeps one residual per key (a bucket)."""

    def __init__(self, cfg: CompressionConfig) -> None:
        if cfg.method != "threshold_topk":
            raise ValueError(f"ThresholdTopK needs compression.method='threshold_topk', got {cfg.method!r}")
        self.threshold = cfg.threshold
        self.topk_ratio = cfg.topk_ratio
        self.error_feedback = cfg.error_feedback
        self.value_dtype = VALUE_DTYPES[cfg.value_dtype]
        self.residuals: dict[int, torch.Tensor] = {}
        self.residual_resets = 0

    def select(self, key: int, grad: torch.Tensor) -> Selection:
        """Pick what to send of ``grad`` (1-D fp32); updates the residual of ``key``."""
        # A private copy when it becomes the residual: ``grad`` is often a live bucket buffer.
        acc = grad.detach().to(torch.float32, copy=self.error_feedback)
        residual = self.residuals.get(key)
        if self.error_feedback and residual is not None:
            if residual.numel() != acc.numel():  # the caller re-bucketed (DDP does once, after step 0)
                self.residual_resets += 1
            else:
                acc += residual
        magnitude = acc.abs()
        above = int(torch.count_nonzero(magnitude >= self.threshold))  # 100x a bool .sum() on CPU
        k = min(above, math.ceil(self.topk_ratio * above))
        indices = _largest(magnitude, k)
        values = acc[indices].to(self.value_dtype)
        if self.error_feedback:
            acc.index_put_((indices,), acc[indices] - values.to(torch.float32))
            self.residuals[key] = acc
        return Selection(indices, values, acc.numel())

    def residual_norm(self) -> float:
        """L2 norm of everything this worker still owes the others."""
        if not self.residuals:
            return 0.0
        return math.sqrt(sum(float(r.double().pow(2).sum()) for r in self.residuals.values()))


def _largest(magnitude: torch.Tensor, k: int) -> torch.Tensor:
    """Sorted positions of the ``k`` largest entries: a selection (O(n)) and a mask, no sort.

    A selection + ``nonzero`` beats ``topk`` + ``sort`` (1.5x at 30% of 4M entries); on CPU
    numpy's introselect is a further 2x over ``torch.kthvalue``. Ties at the k-th value are
    broken by position."""
    n = magnitude.numel()
    if k == 0:
        return torch.empty(0, dtype=torch.int64, device=magnitude.device)
    if k == n:
        return torch.arange(n, device=magnitude.device)
    if magnitude.device.type == "cpu":
        kth = torch.tensor(np.partition(magnitude.numpy(), n - k)[n - k])
    else:
        kth = torch.kthvalue(magnitude, n - k + 1).values
    mask = magnitude > kth
    missing = k - int(torch.count_nonzero(mask))
    if missing > 0:
        mask[torch.nonzero(magnitude == kth).flatten()[:missing]] = True
    return torch.nonzero(mask).flatten()
