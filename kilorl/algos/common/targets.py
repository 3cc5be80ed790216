"""Target-network updates (TorchRL's ``HardUpdate`` / ``SoftUpdate``): a copy of the online
network, or Polyak averaging ``target <- tau * online + (1 - tau) * target``."""

from __future__ import annotations

import torch


@torch.no_grad()
def hard_update(target: torch.nn.Module, online: torch.nn.Module) -> None:
    """``target`` takes ``online``'s parameters and buffers exactly."""
    for t, o in zip(target.state_dict().values(), online.state_dict().values(), strict=True):
        t.copy_(o)


@torch.no_grad()
def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging of parameters (``tau`` = 1: a hard update); buffers are copied."""
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    if tau == 1.0:
        hard_update(target, online)
        return
    t_params, o_params = list(target.parameters()), list(online.parameters())
    torch._foreach_lerp_(t_params, o_params, tau)  # t + tau * (o - t)
    for t, o in zip(target.buffers(), online.buffers(), strict=True):
        t.copy_(o)


class TargetUpdater:
    """A target network updated every ``interval`` env steps (SB3's ``target_update_interval``),
    by Polyak ``tau`` (1: hard). Several intervals crossed at once with an online network that
    did not change in between compose: ``c`` soft updates are one with ``1 - (1 - tau)^c``."""

    def __init__(self, interval: int, tau: float, env_steps: int = 0) -> None:
        self.interval, self.tau = interval, tau
        self.done_until = env_steps // interval
        """Intervals already applied (``env_steps // interval`` at the last update)."""

    def maybe_update(self, target: torch.nn.Module, online: torch.nn.Module, env_steps: int) -> int:
        """Apply the updates due by ``env_steps``; returns how many intervals were crossed."""
        crossed = env_steps // self.interval - self.done_until
        if crossed <= 0:
            return 0
        self.done_until += crossed
        soft_update(target, online, 1.0 - (1.0 - self.tau) ** crossed)
        return crossed
