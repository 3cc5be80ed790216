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


def test_discrete_sampling_draws_each_action_at_its_probability():
    model = build_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), ModelConfig())
    with torch.no_grad():
        model.policy_head.weight.zero_()
        model.policy_head.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))  # the same logits for every observation
    torch.manual_seed(0)
    n = 60_000
    actions, logp, _ = model.act(torch.randn(n, 4))
    freq = np.bincount(actions.numpy(), minlength=3) / n
    probs = torch.softmax(torch.tensor([0.0, 1.0, -1.0]), -1).numpy()
    # 5 standard errors of a binomial frequency: a biased sampler (e.g. argmax, or uniform) is far outside.
    assert np.all(np.abs(freq - probs) < 5 * np.sqrt(probs * (1 - probs) / n)), (freq, probs)
    assert torch.allclose(logp, torch.log(torch.from_numpy(probs))[actions], atol=1e-6)
    greedy, _, _ = model.act(torch.randn(8, 4), deterministic=True)
    assert greedy.tolist() == [1] * 8
