"""The Q network: a torso (an MLP, or the Nature CNN over image stacks, ``model.torso``) and a
Q head (optionally dueling), with the policy protocol every model declares (``policy``,
``to_env_action``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from kilorl.models.actor_critic import as_input
from kilorl.models.cnn import NatureCNN

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


class QNetwork(nn.Module):
    """``Q(s, .)`` for a discrete action space."""

    discrete = True

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str = "relu",
                 dueling: bool = False, cnn: NatureCNN | None = None) -> None:
        """``cnn``: convolutions before the fully connected ``hidden_sizes`` (``obs_dim`` is then theirs)."""
        super().__init__()
        self.cnn = cnn
        layers: list[nn.Module] = []
        sizes = [cnn.out_dim if cnn is not None else obs_dim, *hidden_sizes]
        for i, o in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(i, o), _ACTIVATIONS[activation]()]
        self.torso = nn.Sequential(*layers)
        self.dueling = dueling
        self.head = nn.Linear(sizes[-1], n_actions)
        if dueling:
            self.value_head = nn.Linear(sizes[-1], 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = self.torso(self.cnn(obs) if self.cnn is not None else as_input(obs).flatten(1))
        q = self.head(h)
        if self.dueling:
            q = self.value_head(h) + q - q.mean(-1, keepdim=True)
        return q

    @torch.no_grad()
    def policy(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The greedy action (a Q network has no other mode to play)."""
        return self(obs).argmax(-1)

    def to_env_action(self, actions: torch.Tensor) -> np.ndarray:
        return actions.numpy().astype(np.int64)


def build_q_network(obs_space: gym.Space, action_space: gym.Space, model_cfg, algo_cfg=None) -> QNetwork:
    """From a ``ModelConfig``: ``hidden_sizes`` and ``activation``; ``model.dueling`` adds the
    dueling streams; ``model.torso: nature_cnn`` puts the Nature convolutions first."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {obs_space}; MLP models need a Box")
    cnn = NatureCNN(tuple(obs_space.shape)) if getattr(model_cfg, "torso", "mlp") == "nature_cnn" else None
    return QNetwork(int(np.prod(obs_space.shape)), int(action_space.n), list(model_cfg.hidden_sizes),
                    model_cfg.activation, bool(getattr(model_cfg, "dueling", False)), cnn)
