"""The actor-critic network a run's ``model`` section asks for: memoryless or recurrent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from torch import nn

from kilorl.models.actor_critic import ActorCritic
from kilorl.models.recurrent import RecurrentActorCritic


def build_actor_critic(obs_space: gym.Space, action_space: gym.Space, model_cfg) -> nn.Module:
    """Construct from a ``ModelConfig`` (kept duck-typed so models do not import config): a
    ``RecurrentActorCritic`` when ``model_cfg.recurrent`` is set, else the MLP ``ActorCritic``."""
    if getattr(model_cfg, "torso", "mlp") != "mlp":
        raise ValueError(f"model.torso: {model_cfg.torso} is for Q networks (algo.name: dqn); this model is an MLP")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {obs_space}; MLP models need a Box")
    recurrent = getattr(model_cfg, "recurrent", None)
    if recurrent is not None and getattr(model_cfg, "actor_inputs", None) is not None:
        raise ValueError("model.actor_inputs is not supported with model.recurrent")
    if recurrent is not None:
        return RecurrentActorCritic(
            int(np.prod(obs_space.shape)), action_space, list(model_cfg.hidden_sizes), cell=recurrent.type,
            hidden_size=recurrent.hidden_size, num_layers=recurrent.num_layers, activation=model_cfg.activation,
            shared_backbone=model_cfg.shared_backbone, init_log_std=model_cfg.init_log_std,
            ortho_init=model_cfg.ortho_init)
    return ActorCritic(
        obs_dim=int(np.prod(obs_space.shape)),
        action_space=action_space,
        hidden_sizes=list(model_cfg.hidden_sizes),
        activation=model_cfg.activation,
        shared_backbone=model_cfg.shared_backbone,
        init_log_std=model_cfg.init_log_std,
        ortho_init=model_cfg.ortho_init,
        actor_inputs=getattr(model_cfg, "actor_inputs", None),
    )
