"""One optimizer step of a named module: gradient sync over learners, norm clipping, the
step; parameters and gradients in one flat buffer where one learner owns them (one call for
clipping and Adam, ``kilorl.algos.flat_params``)."""

from __future__ import annotations

import contextlib

import torch

from kilorl.algos.flat_params import FlatParameters
from kilorl.algos.optim import FunctionalAdam
from kilorl.core import GradientComm


class OptimizerStep:
    """Adam (fused where torch has it) over ``module``'s parameters, with ``grad_comm`` and clipping."""

    def __init__(self, module: torch.nn.Module, grad_comm: GradientComm, lr: float, max_grad_norm: float | None,
                 eps: float = 1e-8, world_size: int = 1, mixed_precision: str = "no") -> None:
        self.params = list(module.parameters())
        self.grad_comm, self.max_grad_norm = grad_comm, max_grad_norm
        self.flat = FlatParameters(self.params) if world_size == 1 else None
        self.optimizer = FunctionalAdam(self.params, lr=lr, eps=eps, flat=self.flat)
        self.device_type = self.params[0].device.type if self.params else "cpu"
        self.bf16 = mixed_precision == "bf16"

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast for the forward pass when ``train.mixed_precision: bf16``."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> torch.Tensor:
        """Average gradients over ranks, clip, step; returns the gradient norm before clipping."""
        self.grad_comm.synchronize(self.params)
        limit = self.max_grad_norm if self.max_grad_norm is not None else float("inf")
        if self.flat is not None:
            norm = self.flat.clip_grad_norm_(limit)
        else:
            norm = torch.nn.utils.clip_grad_norm_(self.params, limit, foreach=True)
        self.optimizer.step()
        return norm

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
