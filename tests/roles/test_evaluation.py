"""Episodes with a policy state: repeatable per seed, and harmless to the learner that plays them."""

from __future__ import annotations

import torch

from kilorl.algos import get as get_algorithm
from kilorl.roles.evaluation import EpisodeRunner
from tests.conftest import tiny_config


def _policy_state(cfg, seed: int = 0) -> dict:
    """A freshly initialised model's state, as an algorithm's ``state()`` gives it."""
    probe = EpisodeRunner(cfg)
    obs_space, action_space = probe.envs[0].observation_space, probe.envs[0].action_space
    probe.close()
    torch.manual_seed(seed)
    model = get_algorithm(cfg.algo.name).load("model")(obs_space, action_space, cfg.model)
    return {"model": model.state_dict(),
            "obs_rms": {"mean": torch.zeros(obs_space.shape).numpy(), "var": torch.ones(obs_space.shape).numpy()}}


def test_the_same_seed_plays_the_same_episodes_and_another_seed_others():
    cfg = tiny_config()
    state, runner = _policy_state(cfg), EpisodeRunner(cfg)
    first = runner.returns(state, episodes=5, seed=7, deterministic=False)
    assert runner.returns(state, episodes=5, seed=7, deterministic=False) == first
    assert runner.returns(state, episodes=5, seed=8, deterministic=False) != first
    assert len(first) == 5 and all(r >= 1 for r in first)


def test_building_a_runner_and_sampling_episodes_leave_the_callers_random_stream_where_it_was():
    """A learner builds its runner at its first evaluation: its minibatch order must not move."""
    cfg = tiny_config()
    state = _policy_state(cfg)
    torch.manual_seed(123)
    before = torch.get_rng_state().clone()
    runner = EpisodeRunner(cfg)
    runner.returns(state, episodes=3, seed=1, deterministic=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_each_call_plays_the_state_it_is_given():
    """A runner that played one policy plays the next exactly as a fresh runner would."""
    cfg = tiny_config()
    used = EpisodeRunner(cfg)
    used.returns(_policy_state(cfg, seed=0), episodes=4, seed=3, deterministic=False)
    again = used.returns(_policy_state(cfg, seed=1), episodes=8, seed=3, deterministic=False)
    assert again == EpisodeRunner(cfg).returns(_policy_state(cfg, seed=1), episodes=8, seed=3, deterministic=False)


def test_a_recurrent_policy_is_played_with_its_state_as_an_actor_steps_it_greedily():
    """Each episode carries its own state from zero: the returns are those of stepping the
    model by hand, state and all, on the same seeds (and not those of a memoryless replay)."""
    cfg = tiny_config(env={"id": "kilorl.envs.memory:CartPoleNoVelocity", "max_episode_steps": 500},
                      model={"recurrent": {"type": "gru", "hidden_size": 8}})
    state, runner = _policy_state(cfg, seed=4), EpisodeRunner(cfg)
    got = runner.returns(state, episodes=3, seed=11)
    model = get_algorithm(cfg.algo.name).load("model")(runner.envs[0].observation_space,
                                                       runner.envs[0].action_space, cfg.model)
    model.load_state_dict(state["model"])
    expected, stateless = [], []
    for k in range(3):
        for carry, out in ((True, expected), (False, stateless)):
            env = runner.envs[k]
            obs, _ = env.reset(seed=11 + k)
            memory, total, done = model.initial_state(1), 0.0, False
            while not done:
                action, _, _, new = model.act(torch.from_numpy(obs[None]), memory, deterministic=True)
                memory = new if carry else model.initial_state(1)
                obs, reward, terminated, truncated, _ = env.step(model.to_env_action(action)[0])
                total, done = total + float(reward), terminated or truncated
            out.append(total)
    assert got == expected
    assert got != stateless  # the state changes what is played
