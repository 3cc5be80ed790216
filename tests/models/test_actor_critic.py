"""Policy heads: Categorical for Discrete, diagonal Gaussian for Box."""

import gymnasium as gym
import numpy as np
import torch

from kilorl.config import ModelConfig
from kilorl.models import build_actor_critic


def test_discrete_policy_samples_valid_actions():
    model = build_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), ModelConfig())
    actions, logp, values = model.act(torch.randn(16, 4))
    assert actions.shape == (16,) and set(actions.tolist()) <= {0, 1, 2}
    assert logp.shape == values.shape == (16,) and (logp <= 0).all()
    assert model.to_env_action(actions).dtype == np.int64
    # The log-softmax fast path agrees with torch.distributions.Categorical.
    obs = torch.randn(32, 4)
    dist = model.distribution(obs)
    a = dist.sample()
    logp, entropy, _ = model.evaluate_actions(obs, a)
    assert torch.allclose(logp, dist.log_prob(a), atol=1e-6) and torch.allclose(entropy, dist.entropy(), atol=1e-6)


def test_gaussian_log_prob_sums_over_action_dims_and_actions_are_clipped():
    space = gym.spaces.Box(np.array([-2.0, -0.5], np.float32), np.array([2.0, 0.5], np.float32))
    model = build_actor_critic(gym.spaces.Box(-1, 1, (3,)), space, ModelConfig(init_log_std=1.0))
    obs = torch.randn(64, 3)
    dist = model.distribution(obs)
    a = dist.sample()
    logp, entropy, values = model.evaluate_actions(obs, a)
    assert torch.allclose(logp, dist.log_prob(a).sum(-1))
    assert torch.allclose(entropy, dist.entropy().sum(-1)) and values.shape == (64,)
    env_a = model.to_env_action(a * 10)
    assert (env_a[:, 0] <= 2).all() and (env_a[:, 0] >= -2).all() and (np.abs(env_a[:, 1]) <= 0.5).all()
    mode, _, _ = model.act(obs, deterministic=True)
    assert torch.allclose(mode, dist.mean)


def test_shared_backbone_shares_parameters():
    shared = build_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), ModelConfig(shared_backbone=True))
    separate = build_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), ModelConfig())
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(shared) < count(separate)
