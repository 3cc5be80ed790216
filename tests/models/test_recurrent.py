"""The recurrent actor-critic: one step at a time (the actor) and a whole sequence (the learner)
compute the same thing, and an episode start zeroes the state before its step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from kilorl.models.recurrent import RecurrentActorCritic

T, B = 12, 5


def _model(cell: str, shared: bool, layers: int = 1, discrete: bool = True) -> RecurrentActorCritic:
    torch.manual_seed(0)
    space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    return RecurrentActorCritic(4, space, [16], cell=cell, hidden_size=8, num_layers=layers, shared_backbone=shared)


def _stepped(model: RecurrentActorCritic, obs: torch.Tensor, starts: torch.Tensor, state: dict[str, torch.Tensor]):
    """What an actor does: one step at a time, rows zeroed where an episode starts."""
    logps, values, actions = [], [], []
    for t in range(obs.shape[0]):
        state = {k: v * (1.0 - starts[t]).view(-1, 1, 1) for k, v in state.items()}
        a, logp, v, state = model.act(obs[t], state)
        actions.append(a), logps.append(logp), values.append(v)
    return torch.stack(actions), torch.stack(logps), torch.stack(values)


@pytest.mark.parametrize(("cell", "shared", "layers", "discrete"),
                         [("lstm", False, 1, True), ("gru", True, 2, True), ("lstm", True, 1, False)])
def test_the_sequence_forward_reproduces_the_stepwise_log_probs_and_values(cell, shared, layers, discrete):
    model = _model(cell, shared, layers, discrete)
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(T, B, 4, generator=g)
    starts = (torch.rand(T, B, generator=g) < 0.25).float()
    starts[0] = 0.0
    state = {k: torch.randn(v.shape, generator=g) for k, v in model.initial_state(B).items()}
    actions, logp, values = _stepped(model, obs, starts, state)
    seq_logp, entropy, seq_values = model.evaluate_sequence(obs, actions, starts, state)
    assert starts[1:].sum() > 0 and entropy.shape == (T, B)
    torch.testing.assert_close(seq_logp, logp, rtol=0, atol=1e-6)
    torch.testing.assert_close(seq_values, values, rtol=0, atol=1e-6)


def test_an_episode_start_zeroes_the_state_before_its_step():
    model = _model("lstm", False)
    obs = torch.randn(B, 4)
    state = {k: torch.randn(v.shape) for k, v in model.initial_state(B).items()}
    start = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    _, logp, values, _ = model.act(obs, state, start, deterministic=True)
    _, zero_logp, zero_values, _ = model.act(obs, model.initial_state(B), deterministic=True)
    _, kept_logp, kept_values, _ = model.act(obs, state, deterministic=True)
    fresh, kept = start.bool(), ~start.bool()
    torch.testing.assert_close(values[fresh], zero_values[fresh])
    torch.testing.assert_close(values[kept], kept_values[kept])
    assert not torch.allclose(zero_values[kept], kept_values[kept])  # the state does matter


def test_the_state_is_env_axis_first_and_zero_for_fresh_episodes():
    model = _model("lstm", False, layers=2)
    state = model.initial_state(3)
    assert sorted(state) == ["pi_c", "pi_h", "vf_c", "vf_h"]
    assert all(v.shape == (3, 2, 8) and not v.any() for v in state.values())
    assert sorted(_model("gru", True).initial_state(1)) == ["pi_h"]
