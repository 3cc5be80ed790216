"""``model.actor_inputs``: the policy sees a prefix of the observation, the value all of it
(MAPPO's centralised critic: the agent's own observation, then the global state)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from kilorl.models import ActorCritic


def test_the_policy_ignores_entries_after_actor_inputs_and_the_value_does_not():
    torch.manual_seed(0)
    model = ActorCritic(10, gym.spaces.Discrete(5), [16, 16], actor_inputs=4)
    obs = torch.randn(6, 10)
    other = obs.clone()
    other[:, 4:] = torch.randn(6, 6)  # a different global state, the same own observations
    actions = torch.randint(0, 5, (6,))
    logp, entropy, value = model.evaluate_actions(obs, actions)
    logp2, entropy2, value2 = model.evaluate_actions(other, actions)
    torch.testing.assert_close(logp, logp2)
    torch.testing.assert_close(entropy, entropy2)
    assert not torch.allclose(value, value2)
    changed = obs.clone()
    changed[:, 0] += 1.0  # the control: the policy does read its own entries
    assert not torch.allclose(model.evaluate_actions(changed, actions)[0], logp)


def test_actor_inputs_must_leave_entries_for_the_critic_and_needs_separate_torsos():
    with pytest.raises(ValueError, match="model.actor_inputs=10 must be less than the observation size 10"):
        ActorCritic(10, gym.spaces.Discrete(5), [16], actor_inputs=10)
    with pytest.raises(ValueError, match="cannot share a backbone"):
        ActorCritic(10, gym.spaces.Discrete(5), [16], actor_inputs=4, shared_backbone=True)
