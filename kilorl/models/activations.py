"""Activations whose torch CPU kernel is slower than an equivalent built from faster ones.

``torch.tanh`` on CPU runs at ~2.7 ns per float32 element here (torch 2.13, AVX512
build: 88 us for a 512x64 batch) while ``torch.sigmoid`` is vectorized (15 us). PPO's
default torsos are tanh MLPs, so a CartPole update spent ~20% of its time in
``aten::tanh``. ``Tanh`` computes ``2 * sigmoid(2x) - 1`` on CPU tensors of
``FAST_MIN_ELEMENTS`` or more (31 us for the same batch) and differentiates with torch's
own ``tanh_backward`` on the output, exactly as ``torch.tanh``'s autograd does. Small
batches (an actor stepping a few envs) and other devices keep ``torch.tanh``.

Accuracy: the identity loses relative precision for tiny inputs; the absolute error
stays below 2e-7 (float32's epsilon is 1.19e-7), which an activation feeding a linear
layer does not notice (tested in ``tests/models/test_activations.py``).
"""

from __future__ import annotations

import torch
from torch import nn

FAST_MIN_ELEMENTS = 4096
"""Below this many elements the kernel's speed does not matter and ``torch.tanh`` is used."""


class _SigmoidTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh``, through the sigmoid identity where that is faster (large float CPU tensors)."""
    if x.device.type != "cpu" or x.numel() < FAST_MIN_ELEMENTS or x.dtype not in (torch.float32, torch.float64):
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SigmoidTanh.apply(x)
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


class Tanh(nn.Module):
    """Drop-in ``nn.Tanh`` (no parameters, same state dict) computed by ``tanh`` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tanh(x)
