"""Agents map to policies by name pattern, first match; unmapped agents and agents of different
spaces on one policy are errors that name them, raised when the environments are built."""

from __future__ import annotations

import pytest

from kilorl.envs import make_vector_env
from kilorl.envs.agent_mapping import map_agents

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_KW = {"N": 3, "local_ratio": 0.5, "max_cycles": 25}


def test_the_first_matching_pattern_picks_the_policy():
    mapping = {"agent_0": "leader", "agent_*": "shared", "*": "other"}
    assert map_agents(mapping, ["agent_0", "agent_1", "adversary_0"]) == {
        "agent_0": "leader", "agent_1": "shared", "adversary_0": "other"}


def test_every_unmapped_agent_is_listed():
    with pytest.raises(ValueError, match=r"no pattern maps agents \['agent_2', 'adversary_0'\]"):
        map_agents({"agent_0": "shared", "agent_1": "shared"}, ["agent_0", "agent_1", "agent_2", "adversary_0"])


def test_building_simple_spread_with_an_agent_left_unmapped_fails_naming_it():
    with pytest.raises(ValueError, match=r"multi_agent.policy_mapping: no pattern maps agents \['agent_2'\]"):
        make_vector_env(SPREAD, 1, SPREAD_KW, policy_mapping={"agent_[01]": "shared"})


def test_agents_of_different_spaces_on_one_shared_policy_fail_naming_the_policy_and_agents():
    with pytest.raises(ValueError, match=r"agents \['late'\] mapped to policy 'shared' have observation/action spaces"):
        make_vector_env("tests.envs.scripted_agents:parallel_env", 1, {"odd_space": True},
                        policy_mapping={"*": "shared"})


def test_a_mapping_for_a_gymnasium_env_is_refused():
    with pytest.raises(ValueError, match="multi_agent: env.id 'CartPole-v1' is not a PettingZoo ParallelEnv"):
        make_vector_env("CartPole-v1", 1, policy_mapping={"*": "shared"})


def test_a_complete_mapping_builds_the_columns_and_records_each_agents_policy():
    envs = make_vector_env(SPREAD, 2, SPREAD_KW, policy_mapping={"agent_*": "shared"})
    assert envs.num_envs == 6 and envs.agent_policy == dict.fromkeys(["agent_0", "agent_1", "agent_2"], "shared")
