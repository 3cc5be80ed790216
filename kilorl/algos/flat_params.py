"""A model's parameters and gradients as views of two contiguous buffers.

Why: a small policy's update is dominated by per-tensor overhead, not arithmetic. Gradient
clipping and Adam over the 12 tensors of a 64-64 actor-critic take 208 us per step (torch's
foreach clipping plus the fused Adam kernel), over one flat tensor 52-68 us
(``docs/benchmarks.md``, "The learner's and the actor's CPU per sample"). The same idea as
DDP's ``gradient_as_bucket_view``: each ``p.data`` and ``p.grad`` is a view, autograd
accumulates into the grad views in place, and one call clips or steps them all.

Only for a learner that owns its gradients (one rank): with several ranks the gradient
synchronisation owns them.
"""

from __future__ import annotations

import torch


class FlatParameters:
    """``params`` rebound onto one data buffer and one gradient buffer (same device and dtype)."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        if not params or len({(p.device, p.dtype) for p in params}) != 1:
            raise ValueError("flat parameters need at least one parameter, all of one device and dtype")
        self.params = list(params)
        total = sum(p.numel() for p in self.params)
        self.data = torch.empty(total, device=self.params[0].device, dtype=self.params[0].dtype)
        self.grad = torch.zeros_like(self.data)
        self.spans: list[tuple[int, int]] = []
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                self.data[offset:offset + n].copy_(p.reshape(-1))
                p.data = self.data[offset:offset + n].view_as(p)
                self.spans.append((offset, n))
                offset += n
        self._bind_grads()

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` (a buffer shaped like ``data``) cut into per-parameter views."""
        return [flat[o:o + n].view_as(p) for p, (o, n) in zip(self.params, self.spans)]

    def _bind_grads(self) -> None:
        self._grads = self.views(self.grad)
        for p, g in zip(self.params, self._grads):
            p.grad = g

    def zero_grad(self) -> None:
        """Zero every gradient; a grad someone replaced or set to None is bound to its view again."""
        self.grad.zero_()
        if any(p.grad is not g for p, g in zip(self.params, self._grads)):
            self._bind_grads()

    @torch.no_grad()
    def gather(self) -> None:
        """Bring back gradients that left their views (an optimizer's ``zero_grad`` set them to
        None and autograd made new ones): copied into the buffer, each ``p.grad`` a view again."""
        for p, g in zip(self.params, self._grads):
            if p.grad is g:
                continue
            if p.grad is None:
                g.zero_()
            else:
                g.copy_(p.grad)
            p.grad = g

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` (2-norm) over the one gradient buffer; returns the norm."""
        self.gather()
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm
