"""Recurrent PPO in ``chunks`` mode: fixed-length chunks of env columns, each from the state
the actor passed through at its first step (replayed from ``Rollout.state``), with ``burn_in``
steps that refresh that state without loss or gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.algos.sequences import chunk_forward, chunk_minibatches, chunk_rows, chunks_per_column, episode_starts, stored_states
from kilorl.config import ConfigError
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config

RECURRENT = {"recurrent": {"type": "lstm", "hidden_size": 8}}
NOVEL = {"id": "kilorl.envs.memory:CartPoleNoVelocity", "max_episode_steps": 500}


def _pair(T: int, N: int, **algo):
    """A learner in chunks mode and an env runner acting with its published weights."""
    cfg = tiny_config(env=NOVEL, algo={"rollout_length": T, "num_minibatches": 1, "sequence_mode": "chunks", **algo},
                      parallelism={"envs_per_actor": N}, model=RECURRENT)
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    return learner, EnvRunner(cfg, store, 0, seed=0)


def _second_rollout(runner, with_starts: bool = True):
    """A rollout whose saved state is not zero (and inside which episodes start)."""
    runner.collect(0)
    rollout = runner.collect(0)[0]
    assert any(np.abs(v).sum() > 0 for v in rollout.state.values())
    assert episode_starts(rollout).sum() > 0 or not with_starts
    return rollout


def _tensors(rollout):
    T, N = rollout.shape
    obs = torch.from_numpy(rollout.steps[keys.OBS]).float()
    actions = torch.from_numpy(rollout.steps[keys.ACTIONS])
    starts = torch.from_numpy(episode_starts(rollout))
    state = {k: torch.from_numpy(v) for k, v in rollout.state.items()}
    return T, N, obs, actions, starts, state


@pytest.mark.parametrize(("sequence_length", "burn_in"), [(8, 0), (7, 3), (10, 9), (30, 20)])
def test_chunks_from_replayed_states_reproduce_the_actors_log_probs_and_values(sequence_length, burn_in):
    """Every step, in whichever chunk trains it, gets the actor's log-prob and value: the stored
    states are the actor's and burn-in replays the steps before a chunk exactly (rollouts of
    36 steps: the last chunk padded where the stride does not divide it)."""
    _, runner = _pair(36, 4)
    rollout = _second_rollout(runner)
    T, N, obs, actions, starts, state = _tensors(rollout)
    stride = sequence_length - burn_in
    K = chunks_per_column(T, sequence_length, burn_in)
    model = runner.model
    stored = stored_states(model, obs, starts, state, stride, burn_in, K)
    forward = chunk_forward(model, obs, actions, starts, stored, stride, burn_in)
    cols, ks = chunk_minibatches(N, K, N, 1, torch.device("cpu"))[0]
    rows = chunk_rows(cols, ks, T, N, stride)
    assert sorted(rows.tolist()) == list(range(T * N))  # every step carries the loss exactly once
    with torch.no_grad():
        logp, _, values = forward(cols, ks)
    np.testing.assert_allclose(logp.numpy(), rollout.steps[keys.LOGP].reshape(-1)[rows.numpy()], atol=1e-6)
    np.testing.assert_allclose(values.numpy(), rollout.steps[keys.VALUES].reshape(-1)[rows.numpy()], atol=1e-6)


def test_without_burn_in_a_chunk_started_from_zero_state_would_not_reproduce_the_actor():
    """The comparison above means something: the stored state matters."""
    _, runner = _pair(36, 4)
    rollout = _second_rollout(runner)
    T, N, obs, actions, starts, state = _tensors(rollout)
    K = chunks_per_column(T, 8, 0)
    zeros = {k: torch.zeros(K, *v.shape) for k, v in state.items()}
    cols, ks = chunk_minibatches(N, K, N, 1, torch.device("cpu"))[0]
    with torch.no_grad():
        _, _, values = chunk_forward(runner.model, obs, actions, starts, zeros, 8, 0)(cols, ks)
    recorded = rollout.steps[keys.VALUES].reshape(-1)[chunk_rows(cols, ks, T, N, 8).numpy()]
    assert np.abs(values.numpy() - recorded).max() > 1e-3


def test_burn_in_steps_carry_no_gradient():
    """A chunk's loss reaches the observations of the steps it trains, never those of its burn-in."""
    _, runner = _pair(24, 2)
    rollout = _second_rollout(runner, with_starts=False)
    T, N, obs, actions, starts, state = _tensors(rollout)
    sequence_length, burn_in = 10, 4
    stride, K = sequence_length - burn_in, chunks_per_column(T, sequence_length, burn_in)
    model = runner.model
    stored = stored_states(model, obs, starts, state, stride, burn_in, K)
    obs = obs.clone().requires_grad_(True)
    cols, ks = torch.tensor([0, 1]), torch.tensor([2, 2])  # chunk 2: burn-in 8..11, trained 12..17
    logp, _, values = chunk_forward(model, obs, actions, starts, stored, stride, burn_in)(cols, ks)
    (logp.sum() + values.sum()).backward()
    grad = obs.grad.abs().sum(-1)
    assert float(grad[12:18].min()) > 0
    assert float(grad[: 12].abs().max()) == 0.0 and float(grad[18:].abs().max()) == 0.0


@pytest.mark.parametrize(("sequence_length", "burn_in", "num_minibatches"), [(8, 0, 1), (8, 4, 2), (11, 6, 4)])
def test_the_first_minibatch_in_chunks_mode_has_ratio_one_and_kl_zero(sequence_length, burn_in, num_minibatches):
    learner, runner = _pair(24, 4, update_epochs=1, num_minibatches=num_minibatches,
                            sequence_length=sequence_length, burn_in=burn_in)
    rollout = _second_rollout(runner)
    algorithm = learner.algorithm
    seen = []
    original = algorithm._minibatch

    def first_only(idx, parts, forward, old_logp, *rest):
        if not seen:
            new_logp = torch.cat([forward(i)[0] for i in range(len(parts))]).detach()
            assert len(new_logp) == len(idx)
            seen.append((new_logp - old_logp[idx]).exp())
        return original(idx, parts, forward, old_logp, *rest)

    algorithm._minibatch = first_only
    stats = learner.update(1, 100, rollout)
    assert seen[0].numel() >= 24 * 4 // num_minibatches // 2  # rollouts of 24: a padded chunk trains 4 of 5 steps
    assert float((seen[0] - 1).abs().max()) < 1e-6
    if num_minibatches == 1:
        assert abs(stats["approx_kl"]) < 1e-6 and stats["clip_fraction"] == 0.0
    assert stats["policy_loss"] == stats["policy_loss"]  # the update ran to the end (no NaN)


def test_chunk_minibatches_take_the_same_positions_from_every_actors_block():
    torch.manual_seed(0)
    batches = chunk_minibatches(8, 3, 4, 4, torch.device("cpu"))
    assert len(batches) == 4
    units = sorted((int(c), int(k)) for cols, ks in batches for c, k in zip(cols, ks))
    assert units == [(c, k) for c in range(8) for k in range(3)]
    for cols, ks in batches:
        first = sorted((int(c), int(k)) for c, k in zip(cols, ks) if c < 4)
        second = sorted((int(c) - 4, int(k)) for c, k in zip(cols, ks) if c >= 4)
        assert first == second and len(first) == 3


@pytest.mark.parametrize(("algo", "message"), [
    ({"sequence_length": 8, "burn_in": 8}, r"algo.burn_in=8 must be smaller than algo.sequence_length=8"),
    ({"sequence_length": 40}, r"algo.sequence_length=40 does not fit the rollout.*algo.rollout_length=32"),
    ({"sequence_length": 16, "burn_in": 8, "num_minibatches": 3},
     r"algo.num_minibatches=3 must divide the 16 chunks of an env runner \(parallelism.envs_per_actor=4"),
])
def test_chunks_that_do_not_fit_are_refused_naming_the_fields(algo, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        tiny_config(model=RECURRENT, algo={"sequence_mode": "chunks", **algo})
