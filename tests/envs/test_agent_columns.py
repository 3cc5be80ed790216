"""PettingZoo parallel environments become vector envs whose columns are agents: dead slots are
masked, agents that appear take a free slot, a copy resets on the step its last agent leaves."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from kilorl.envs import make_parallel_env, make_vector_env
from kilorl.envs.agent_columns import AgentColumns
from tests.envs import scripted_agents

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_KW = {"N": 3, "local_ratio": 0.5, "max_cycles": 25}
SCRIPTED = "tests.envs.scripted_agents:parallel_env"


def test_simple_spread_as_kilorl_builds_it_passes_pettingzoo_parallel_api_test():
    parallel_api_test(make_parallel_env(SPREAD, SPREAD_KW), num_cycles=60)


def test_pistonball_as_kilorl_builds_it_passes_pettingzoo_parallel_api_test():
    parallel_api_test(make_parallel_env("pettingzoo.butterfly.pistonball_v6:parallel_env", {"n_pistons": 4}),
                      num_cycles=5)


def test_the_scripted_env_itself_passes_pettingzoo_parallel_api_test():
    parallel_api_test(scripted_agents.parallel_env(), num_cycles=20)


def test_an_entry_point_returning_a_parallel_env_gives_one_column_per_agent_of_each_copy():
    envs = make_vector_env(SPREAD, 2, SPREAD_KW)
    assert isinstance(envs, AgentColumns)
    assert (envs.num_copies, envs.num_envs) == (2, 6)
    obs, _ = envs.reset(seed=4)
    assert obs.shape == (6, 18) and envs.alive.all()
    assert envs.column_agents() == ["agent_0", "agent_1", "agent_2"] * 2
    reference = make_parallel_env(SPREAD, SPREAD_KW)  # copy 1 is seeded seed + 1
    ref_obs, _ = reference.reset(seed=5)
    np.testing.assert_array_equal(obs[3:], np.stack([ref_obs[a] for a in reference.agents]))


def test_simple_spread_episodes_end_truncated_with_final_observations_and_per_agent_returns():
    envs = make_vector_env(SPREAD, 1, SPREAD_KW)
    reference = make_parallel_env(SPREAD, SPREAD_KW)
    envs.reset(seed=0)
    reference.reset(seed=0)
    total = dict.fromkeys(reference.possible_agents, 0.0)
    rng = np.random.default_rng(0)
    for t in range(25):
        actions = rng.integers(0, 5, size=3)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        ref_obs, ref_rewards, _, ref_trunc, _ = reference.step(dict(zip(reference.possible_agents, actions.tolist())))
        np.testing.assert_allclose(rewards, [ref_rewards[a] for a in reference.possible_agents])
        for a in reference.possible_agents:
            total[a] += ref_rewards[a]
        assert not terminated.any()
        assert truncated.all() == (t == 24)
    for i, a in enumerate(reference.possible_agents):  # the last step's observation is the final one
        np.testing.assert_array_equal(info["final_obs"][i], ref_obs[a])
    (episode,) = envs.take_episodes()
    assert episode.length == 25 and episode.agent_returns == pytest.approx(total)
    assert episode.total == pytest.approx(sum(total.values()))
    assert envs.alive.all() and envs.take_episodes() == []  # reset on the same step, nothing twice


def test_an_agent_that_finishes_early_leaves_a_dead_masked_slot_and_a_late_agent_takes_a_free_one():
    envs = make_vector_env(SCRIPTED, 1, max_num_agents=2)
    obs, _ = envs.reset(seed=0)
    alive, agents = [envs.alive.tolist()], [envs.column_agents()]
    rewards, terminated, truncated, finals = [], [], [], []
    for _ in range(6):
        obs, r, te, tr, info = envs.step(np.zeros(2, np.int64))
        alive.append(envs.alive.tolist())
        agents.append(envs.column_agents())
        rewards.append(r.tolist())
        terminated.append(te.tolist())
        truncated.append(tr.tolist())
        finals.append([None if f is None else f.tolist() for f in info["final_obs"]])
        if te.any() or tr.any():
            assert obs[~envs.alive].sum() == 0  # a dead slot observes zeros
    assert agents == [["a_0", "a_1"], ["a_0", "a_1"], [None, "a_1"], ["late", "a_1"], ["late", "a_1"],
                      ["a_0", "a_1"], ["a_0", "a_1"]]
    assert alive == [[True, True], [True, True], [False, True], [True, True], [True, True], [True, True],
                     [True, True]]
    assert rewards == [[1, 10], [1, 10], [0, 10], [100, 10], [100, 10], [1, 10]]  # a dead slot earns 0
    assert terminated == [[False, False], [True, False], [False, False], [False, False], [False, False],
                          [False, False]]
    assert truncated == [[False, False], [False, False], [False, False], [False, False], [True, True],
                         [False, False]]
    assert finals[1] == [[0, 2], None] and finals[4] == [[2, 5], [1, 5]]
    (episode,) = envs.take_episodes()
    assert episode.agent_returns == {"a_0": 2.0, "a_1": 50.0, "late": 200.0} and episode.length == 5


def test_more_live_agents_than_max_num_agents_is_an_error_naming_the_setting():
    with pytest.raises(ValueError, match=r"agent 'a_1' appeared with all env.max_num_agents=1 slots"):
        make_vector_env(SCRIPTED, 1, max_num_agents=1).reset(seed=0)


def test_agents_with_different_spaces_cannot_share_columns():
    with pytest.raises(ValueError, match=r"agents \['late'\] have observation/action spaces different from 'a_0'"):
        make_vector_env(SCRIPTED, 1, {"odd_space": True})


def test_a_time_limit_on_a_parallel_env_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="env.max_episode_steps: not supported for a PettingZoo ParallelEnv"):
        make_vector_env(SPREAD, 1, SPREAD_KW, max_episode_steps=10)


def test_a_gymnasium_entry_point_still_gives_a_gymnasium_vector_env():
    envs = make_vector_env("tests.envs.scripted:ScriptedEnv", 2)
    assert not isinstance(envs, AgentColumns) and envs.num_envs == 2


def test_with_a_centralized_critic_each_column_carries_the_global_state_after_its_observation():
    envs = make_vector_env(SPREAD, 1, SPREAD_KW, critic_state=True)
    reference = make_parallel_env(SPREAD, SPREAD_KW)
    assert envs.single_observation_space.shape == (18 + 54,) and envs.agent_obs_dim == 18
    obs, _ = envs.reset(seed=2)
    ref_obs, _ = reference.reset(seed=2)
    for i, agent in enumerate(reference.possible_agents):
        np.testing.assert_array_equal(obs[i, :18], ref_obs[agent])
        np.testing.assert_array_equal(obs[i, 18:], reference.state())
    for _ in range(25):
        obs, _, _, truncated, info = envs.step(np.zeros(3, np.int64))
        reference.step(dict.fromkeys(reference.possible_agents, 0))
    assert truncated.all()
    np.testing.assert_array_equal(info["final_obs"][0][18:], reference.state())  # the state the episode ended in
