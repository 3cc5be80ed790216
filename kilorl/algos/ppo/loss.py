"""The PPO clipped surrogate objective (Schulman et al., 2017), as a pure function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class PPOLoss:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
    mask: torch.Tensor | None = None,
) -> PPOLoss:
    """Clipped policy loss + (optionally clipped) value loss - entropy bonus.

    ``approx_kl`` is the low-variance estimator E[(r - 1) - log r] (Schulman's k3).
    ``mask`` (1 for a live agent's row, 0 for a dead column's): every mean is over the live
    rows only, so a dead row contributes no gradient (None: all rows live).
    """
    mean = _mean if mask is None else _masked_mean(mask)
    if norm_adv and advantages.numel() > 1:
        live = advantages if mask is None else advantages[mask > 0]
        advantages = (advantages - live.mean()) / (live.std() + 1e-8)
    log_ratio = new_logp - old_logp
    if mask is not None:
        # A dead row's inputs are whatever its column held: they are replaced before any
        # nonlinearity (a ratio exp(+100) would be inf, and inf * 0 is NaN in backward).
        keep, fresh = mask > 0, new_values.detach()
        log_ratio = torch.where(keep, log_ratio, torch.zeros_like(log_ratio))
        advantages = torch.where(keep, advantages, torch.zeros_like(advantages))
        old_values, returns = torch.where(keep, old_values, fresh), torch.where(keep, returns, fresh)
    ratio = log_ratio.exp()
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    policy = mean(torch.max(pg1, pg2))
    if clip_vloss:
        v_unclipped = (new_values - returns) ** 2
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        value = 0.5 * mean(torch.max(v_unclipped, (v_clipped - returns) ** 2))
    else:
        value = 0.5 * mean((new_values - returns) ** 2)
    ent = mean(entropy)
    with torch.no_grad():
        approx_kl = mean((ratio - 1) - log_ratio)
        clip_fraction = mean(((ratio - 1.0).abs() > clip_coef).float())
    total = policy - ent_coef * ent + vf_coef * value
    return PPOLoss(total, policy, value, ent, approx_kl, clip_fraction)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean()


def _masked_mean(mask: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """Means over the rows where ``mask`` is 1; ``where``, not a product, so that a dead row's
    non-finite value (a ratio of garbage log-probs) cannot reach the gradient as 0 * inf."""
    live = mask > 0
    count = live.sum().clamp(min=1)

    def mean(x: torch.Tensor) -> torch.Tensor:
        return torch.where(live, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / count

    return mean
