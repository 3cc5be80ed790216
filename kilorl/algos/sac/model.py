"""SAC's networks: the tanh-squashed Gaussian policy (the spec's model, all that env runners
fetch and ``kilorl eval`` plays) and the critics, an ensemble of Q networks evaluated in one
batched matrix product per layer.

Actions live in ``[-1, 1]`` everywhere in the learner and the replay table (the policy's
tanh); ``to_env_action`` maps them onto the env's Box bounds, as SB3 and CleanRL do.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kilorl.models.actor_critic import as_input

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""Bounds of the policy's log standard deviation (SB3's clamp)."""
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


def tanh_log_det(u: torch.Tensor) -> torch.Tensor:
    """``sum_i log(1 - tanh(u_i)^2)`` over the last axis, in the stable form
    ``2 (log 2 - u - softplus(-2u))`` (no ``1e-6`` fudge, exact for large ``|u|``)."""
    return (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def squashed_log_prob(mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Log-density of ``a = tanh(u)`` for ``u ~ N(mean, exp(log_std))``: the Gaussian's
    log-density of ``u`` minus the change of variables' ``log |da/du|``."""
    gaussian = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return gaussian - tanh_log_det(u)


def _mlp(sizes: list[int], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(i, o), _ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


class SquashedGaussianActor(nn.Module):
    """``pi(a|s)``: an MLP torso, mean and log-std heads, ``a = tanh(u)``."""

    discrete = False

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], activation: str,
                 low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.hidden_sizes, self.activation = list(hidden_sizes), activation
        self.torso = _mlp([obs_dim, *hidden_sizes], activation)
        self.mean = nn.Linear(hidden_sizes[-1], act_dim)
        self.log_std = nn.Linear(hidden_sizes[-1], act_dim)
        # not persistent: the bounds come from the env, and the published layout stays the weights
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32), persistent=False)
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32), persistent=False)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log-std of the pre-squash Gaussian."""
        h = self.torso(as_input(obs).flatten(1))
        return self.mean(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed action in ``[-1, 1]`` and its log-probability."""
        mean, log_std = self(obs)
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        u = mean + log_std.exp() * noise
        return torch.tanh(u), squashed_log_prob(mean, log_std, u)

    @torch.no_grad()
    def policy(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """``tanh(mean)`` when ``deterministic``, else a sample: what ``kilorl eval`` plays."""
        if deterministic:
            return torch.tanh(self(obs)[0])
        return self.sample(obs)[0]

    def to_env_action(self, actions: torch.Tensor) -> np.ndarray:
        """``[-1, 1]`` actions onto the env's bounds."""
        return (actions * self.action_scale + self.action_bias).numpy()


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied to ``[E, B, in]`` in one ``baddbmm``; each
    initialised like ``nn.Linear`` (uniform within ``1/sqrt(in)``)."""

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class QEnsemble(nn.Module):
    """``num_qs`` critics ``Q_e(s, a)``, optionally with LayerNorm after every hidden layer."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], activation: str, num_qs: int,
                 layer_norm: bool = False) -> None:
        super().__init__()
        self.num_qs = num_qs
        sizes = [obs_dim + act_dim, *hidden_sizes]
        layers: list[nn.Module] = []
        for i, o in zip(sizes[:-1], sizes[1:]):
            layers.append(EnsembleLinear(num_qs, i, o))
            if layer_norm:
                layers.append(nn.LayerNorm(o))  # normalises each member's features alike; affine shared
            layers.append(_ACTIVATIONS[activation]())
        layers.append(EnsembleLinear(num_qs, sizes[-1], 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``[E, B]`` values of ``[B, ...]`` observations and ``[B, A]`` actions."""
        x = torch.cat([as_input(obs).flatten(1), actions], -1)
        return self.net(x.unsqueeze(0).expand(self.num_qs, -1, -1)).squeeze(-1)


def build_sac_actor(obs_space: gym.Space, action_space: gym.Space, model_cfg, algo_cfg=None) -> SquashedGaussianActor:
    """From a ``ModelConfig``: ``hidden_sizes`` and ``activation``."""
    if getattr(model_cfg, "torso", "mlp") != "mlp":
        raise ValueError(f"model.torso: {model_cfg.torso} is for Q networks (algo.name: dqn); this model is an MLP")
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(f"SAC needs a Box action space, got {action_space}")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {obs_space}; MLP models need a Box")
    if len(action_space.shape) != 1:
        raise ValueError(f"SAC needs a 1-D Box action space, got shape {action_space.shape}")
    low, high = np.asarray(action_space.low, np.float64), np.asarray(action_space.high, np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"SAC squashes actions into the Box bounds; {action_space} has infinite bounds")
    return SquashedGaussianActor(int(np.prod(obs_space.shape)), int(np.prod(action_space.shape)),
                                 list(model_cfg.hidden_sizes), model_cfg.activation, low, high)
