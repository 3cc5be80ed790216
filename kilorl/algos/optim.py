"""Adam on torch's functional kernel, without ``torch.optim.Optimizer``.

Why not ``torch.optim.Adam``: its constructor (``add_param_group``, wrapped in
``torch._disable_dynamo``) imports ``torch._dynamo``, which costs 1.1 s of CPU in an idle
learner process here (``python -c "import torch; import torch._dynamo"``: torch 1.0 s, then
dynamo 1.1 s) and more under load; on a 2-core machine that import ran while the first
rollouts were collected and delayed the first update by ~0.6 s of a 4-5 s CartPole run.
The arithmetic is not re-implemented: ``step`` calls ``torch.optim.adam.adam``, the same
functional kernel ``torch.optim.Adam.step`` calls (fused where the device has it), and
``state_dict`` / ``load_state_dict`` use ``torch.optim.Adam``'s format, so checkpoints
written by either load into the other (tested against ``torch.optim.Adam`` in
``tests/algos/test_optim.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.adam import adam as adam_kernel

from kilorl.algos.flat_params import FlatParameters


class FunctionalAdam:
    """Adam (no weight decay, no AMSGrad) over one parameter group; ``param_groups[0]['lr']`` is live.

    With ``flat`` (the parameters' ``FlatParameters``) one kernel call steps them all, and
    every parameter is stepped every time (its gradient is a view, zero when unused): meant
    for models whose every parameter is in the loss, as an actor-critic's are.
    """

    def __init__(self, params: list[torch.nn.Parameter], lr: float, eps: float = 1e-8,
                 betas: tuple[float, float] = (0.9, 0.999), fused: bool | None = None,
                 flat: FlatParameters | None = None) -> None:
        self.params = list(params)
        self.flat = flat
        if flat is not None and [id(p) for p in flat.params] != [id(p) for p in self.params]:
            raise ValueError("flat parameters must be the optimizer's parameters, in order")
        self.fused = _fused_supported(self.params) if fused is None else fused
        self.param_groups: list[dict[str, Any]] = [{
            "lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0, "amsgrad": False, "maximize": False,
            "foreach": None if self.fused else True, "capturable": False, "differentiable": False,
            "fused": self.fused or None, "decoupled_weight_decay": False,
            "params": list(range(len(self.params))),
        }]
        if flat is None:
            self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
            self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
            self.steps = [self._step_tensor(p, 0.0) for p in self.params]
        else:
            self._flat_moments = (torch.zeros_like(flat.data), torch.zeros_like(flat.data))
            self.exp_avg, self.exp_avg_sq = (flat.views(m) for m in self._flat_moments)
            self.steps = [self._step_tensor(self.params[0], 0.0)] * len(self.params)  # one shared counter

    def _step_tensor(self, p: torch.Tensor, value: float) -> torch.Tensor:
        # torch.optim.Adam keeps the step on the parameter's device for the fused kernel, on CPU otherwise
        return torch.tensor(value, dtype=torch.float32, device=p.device if self.fused else "cpu")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``set_to_none`` is ignored with flat parameters: their gradients are views, zeroed."""
        if self.flat is not None:
            self.flat.zero_grad()
            return
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        if self.flat is not None:
            params, grads = [self.flat.data], [self.flat.grad]
            exp_avg, exp_avg_sq, steps = [self._flat_moments[0]], [self._flat_moments[1]], [self.steps[0]]
        else:
            live = [i for i, p in enumerate(self.params) if p.grad is not None]
            if not live:
                return
            params, grads = [self.params[i] for i in live], [self.params[i].grad for i in live]
            exp_avg, exp_avg_sq = [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live]
            steps = [self.steps[i] for i in live]
        beta1, beta2 = group["betas"]
        adam_kernel(
            params, grads, exp_avg, exp_avg_sq, [], steps,
            foreach=None if self.fused else True, fused=self.fused or None, capturable=False, differentiable=False,
            has_complex=False, amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=0.0,
            eps=group["eps"], maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s layout: per-parameter ``step``/``exp_avg``/``exp_avg_sq``, one group."""
        state = {i: {"step": self.steps[i].clone(), "exp_avg": self.exp_avg[i].clone(),
                     "exp_avg_sq": self.exp_avg_sq[i].clone()}
                 for i in range(len(self.params)) if float(self.steps[i]) > 0}
        return {"state": state, "param_groups": [dict(g) for g in self.param_groups]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"optimizer state has {len(groups)} group(s) and "
                             f"{sum(len(g['params']) for g in groups)} parameter(s); this model has 1 and {len(self.params)}")
        group = groups[0]
        self.param_groups[0].update(lr=group["lr"], betas=tuple(group["betas"]), eps=group["eps"])
        saved_steps = []
        for i, p in enumerate(self.params):
            saved = state_dict["state"].get(i, state_dict["state"].get(str(i)))
            if saved is None:
                continue
            if self.flat is not None:  # into the flat moments' views
                self.exp_avg[i].copy_(saved["exp_avg"])
                self.exp_avg_sq[i].copy_(saved["exp_avg_sq"])
            else:
                self.exp_avg[i] = saved["exp_avg"].to(p.device, p.dtype).clone()
                self.exp_avg_sq[i] = saved["exp_avg_sq"].to(p.device, p.dtype).clone()
                self.steps[i] = self._step_tensor(p, float(saved["step"]))
            saved_steps.append(float(saved["step"]))
        if self.flat is not None and saved_steps:  # one counter: every parameter was stepped together
            self.steps[0].fill_(max(saved_steps))


def _fused_supported(params: list[torch.Tensor]) -> bool:
    """The fused kernel exists for floating-point parameters on CPU and CUDA in this torch."""
    return all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
               for p in params)
