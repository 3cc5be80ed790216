"""The PPO clipped surrogate objective (Schulman et al., 2017), as a pure function."""

from __future__ import annotations

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
) -> PPOLoss:
    """Clipped policy loss + (optionally clipped) value loss - entropy bonus.

    ``approx_kl`` is the low-variance estimator E[(r - 1) - log r] (Schulman's k3).
    """
    if norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    policy = torch.max(pg1, pg2).mean()
    if clip_vloss:
        v_unclipped = (new_values - returns) ** 2
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        value = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        value = 0.5 * ((new_values - returns) ** 2).mean()
    ent = entropy.mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    total = policy - ent_coef * ent + vf_coef * value
    return PPOLoss(total, policy, value, ent, approx_kl, clip_fraction)
