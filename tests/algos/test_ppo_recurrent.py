"""Recurrent PPO (``model.recurrent``): the actor carries the state and resets it where an
episode ends, the rollout keeps the state at its start, and the learner's sequence forward
over whole env columns replays exactly what the actor computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.algos.sequences import column_minibatches, episode_starts
from kilorl.config import ConfigError
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config

RECURRENT = {"recurrent": {"type": "lstm", "hidden_size": 8}}


def _pair(T: int = 8, N: int = 2, env: dict | None = None, **algo):
    """A learner and an env runner acting with the learner's published weights."""
    env = env or {"id": "tests.envs.scripted:ScriptedEnv", "kwargs": {"length": 3}}
    cfg = tiny_config(env=env, algo={"rollout_length": T, "num_minibatches": 1, **algo},
                      parallelism={"envs_per_actor": N}, model=RECURRENT)
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    return learner, EnvRunner(cfg, store, 0, seed=0)


def _replayed(model, rollout):
    """The actor's steps done again by hand from ``Rollout.state``: values per step, and the state
    after each step (before any reset)."""
    obs = torch.from_numpy(rollout.steps[keys.OBS]).float()
    starts = torch.from_numpy(episode_starts(rollout))
    state = {k: torch.from_numpy(v) for k, v in rollout.state.items()}
    values, after = [], []
    for t in range(obs.shape[0]):
        state = {k: v * (1.0 - starts[t]).view(-1, 1, 1) for k, v in state.items()}
        _, _, v, state = model.act(obs[t], state)
        values.append(v)
        after.append(state)
    return torch.stack(values), after


def test_the_actor_zeroes_the_state_where_an_episode_ends_and_keeps_it_elsewhere():
    _, runner = _pair()
    runner.collect(0)
    rollout = runner.collect(0)[0]  # the second: its saved state is not zero
    assert any(np.abs(v).sum() > 0 for v in rollout.state.values())
    obs = torch.from_numpy(rollout.steps[keys.OBS]).float()
    starts = episode_starts(rollout)
    assert starts.sum() > 0
    zero = runner.model.initial_state(obs.shape[1])
    for t in range(obs.shape[0]):
        fresh_values = runner.model.act(obs[t], zero)[2].numpy()
        recorded = rollout.steps[keys.VALUES][t]
        for env in range(obs.shape[1]):
            if starts[t, env]:  # the step after an end was taken from zero state
                assert recorded[env] == pytest.approx(fresh_values[env], abs=1e-6)
            elif t > 0:  # elsewhere the state carried on, and it changes V
                assert recorded[env] != pytest.approx(fresh_values[env], abs=1e-6)


def test_bootstrap_values_use_the_state_before_the_reset_and_s_T_the_current_one():
    _, runner = _pair()
    runner.collect(0)
    rollout = runner.collect(0)[0]
    model = runner.model
    values, after = _replayed(model, rollout)
    np.testing.assert_allclose(values.numpy(), rollout.steps[keys.VALUES], atol=1e-6)
    final = rollout.final
    assert rollout.steps[keys.TRUNCATED].any()  # the bootstrap is read somewhere
    for t, env, obs, v in zip(final[keys.FINAL_T], final[keys.FINAL_ENV], final[keys.OBS], final[keys.VALUES]):
        state = {k: s[env : env + 1] for k, s in after[t].items()}
        expected = model.value(torch.from_numpy(obs[None]).float(), state)[0]
        assert v == pytest.approx(float(expected), abs=1e-6)
    done = rollout.steps[keys.TERMINATED][-1] | rollout.steps[keys.TRUNCATED][-1]
    state = {k: s * torch.from_numpy(~done).float().view(-1, 1, 1) for k, s in after[-1].items()}
    expected = model.value(torch.from_numpy(rollout.last[keys.OBS]).float(), state)
    np.testing.assert_allclose(rollout.last[keys.VALUES], expected.numpy(), atol=1e-6)


@pytest.mark.parametrize("num_minibatches", [1, 2, 4])
def test_the_first_minibatch_replays_the_actor_exactly_ratio_one_and_kl_zero(num_minibatches):
    """Whole env columns, unrolled from the saved state with resets at episode starts, give the
    actor's log-probs: the learner's first minibatch sees a ratio of exactly 1."""
    env = {"id": "kilorl.envs.memory:CartPoleNoVelocity", "max_episode_steps": 500}
    learner, runner = _pair(T=24, N=4, env=env, update_epochs=1, num_minibatches=num_minibatches)
    runner.collect(0)
    rollout = runner.collect(0)[0]
    assert episode_starts(rollout).sum() > 0
    algorithm = learner.algorithm
    seen = []
    original = algorithm._minibatch

    def first_only(idx, parts, forward, old_logp, *rest):
        if not seen:
            new_logp = torch.cat([forward(i)[0] for i in range(len(parts))]).detach()
            seen.append((new_logp - old_logp[idx]).exp())
        return original(idx, parts, forward, old_logp, *rest)

    algorithm._minibatch = first_only
    stats = learner.update(1, 100, rollout)
    ratio = seen[0]
    assert ratio.numel() == 24 * 4 // num_minibatches
    assert float((ratio - 1).abs().max()) < 1e-6
    if num_minibatches == 1:
        assert abs(stats["approx_kl"]) < 1e-6 and stats["clip_fraction"] == 0.0


def test_column_minibatches_take_the_same_positions_from_every_actors_block():
    torch.manual_seed(0)
    batches = column_minibatches(8, 4, 2, torch.device("cpu"))
    assert len(batches) == 2 and sorted(torch.cat(batches).tolist()) == list(range(8))
    for cols in batches:
        first, second = cols[cols < 4], cols[cols >= 4] - 4
        assert len(first) == 2 and torch.equal(first.sort().values, second.sort().values)  # block 1 mirrors block 0


def test_a_resumed_learner_takes_the_same_step_and_a_new_actor_starts_from_zero_state():
    learner, runner = _pair(update_epochs=2)
    first, second = runner.collect(0)[0], runner.collect(0)[0]
    learner.update(1, 14, first)
    saved = learner.state()
    cfg, store = runner.cfg, InMemoryParameterStore()
    resumed = LearnerRole(cfg, store, state=saved)
    learner.update(2, 28, second)
    resumed.update(2, 28, second)
    for (name, a), b in zip(learner.state()["model"].items(), resumed.state()["model"].values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    fresh = EnvRunner(cfg, store, 0, seed=1).collect(0)[0]  # a resumed run's actors: fresh episodes
    assert fresh.state.keys() == first.state.keys() and not any(v.any() for v in fresh.state.values())


@pytest.mark.parametrize(("sections", "message"), [
    ({"algo": {"name": "dqn"}}, r"model.recurrent: algo.name=dqn does not train recurrent models \(ppo and a2c do\)"),
    ({"algo": {"num_minibatches": 8}},
     r"algo.num_minibatches=8 must divide parallelism.envs_per_actor=4 with model.recurrent"),
    ({"train": {"gradient_accumulation_steps": 4}}, r"train.gradient_accumulation_steps=4 must divide the 2 env"),
])
def test_batches_a_recurrent_model_cannot_split_are_refused_naming_the_fields(sections, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        tiny_config(model=RECURRENT, **sections)


def test_an_unknown_cell_is_refused_naming_the_field_and_the_choices():
    with pytest.raises((ConfigError, ValueError), match=r"model.recurrent.type.*lstm.*gru"):
        tiny_config(model={"recurrent": {"type": "rnn"}})
