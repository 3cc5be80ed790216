"""The ``multi_agent`` section: policies, the agent-name mapping and ``policies_to_train``, with
errors that name the field."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError, config_from_dict

SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}


def config(multi_agent, **sections):
    return config_from_dict({"env": SPREAD, "multi_agent": multi_agent, **sections})


def test_one_shared_policy_mapped_by_pattern():
    cfg = config({"policies": {"shared": {}}, "policy_mapping": {"agent_*": "shared"}, "policies_to_train": ["shared"]})
    assert list(cfg.multi_agent.policy_mapping.items()) == [("agent_*", "shared")]


def test_a_pattern_mapped_to_an_undeclared_policy_is_named():
    with pytest.raises(ConfigError, match=r"multi_agent.*policy_mapping: pattern 'agent_\*' maps to 'solo', which is not"):
        config({"policies": {"shared": {}}, "policy_mapping": {"agent_*": "solo"}})


def test_policies_to_train_must_name_declared_policies():
    with pytest.raises(ConfigError, match=r"policies_to_train: \['ghost'\] are not in multi_agent.policies"):
        config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}, "policies_to_train": ["ghost"]})


def test_several_policies_are_refused_until_per_policy_learners_exist():
    with pytest.raises(ConfigError, match=r"this build trains one policy shared by every agent"):
        config({"policies": {"a": {}, "b": {}}, "policy_mapping": {"agent_0": "a", "*": "b"}})


def test_an_algorithm_that_does_not_mask_dead_agents_is_refused():
    with pytest.raises(ConfigError, match=r"multi_agent: algo.name=a2c does not mask dead agent columns"):
        config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}}, algo={"name": "a2c"})


def test_a_policy_takes_no_unknown_keys():
    with pytest.raises(ConfigError, match=r"multi_agent.policies.shared.lr"):
        config({"policies": {"shared": {"lr": 1e-3}}, "policy_mapping": {"*": "shared"}})


def test_a_centralized_critic_needs_the_policys_input_size():
    with pytest.raises(ConfigError, match=r"centralized_critic: state needs model.actor_inputs"):
        config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}, "centralized_critic": "state"})
    cfg = config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}, "centralized_critic": "state"},
                 model={"actor_inputs": 18})
    assert cfg.model.actor_inputs == 18


def test_evaluation_during_training_is_refused_with_a_multi_agent_section():
    with pytest.raises(ConfigError, match=r"evaluation.every_env_steps: evaluation episodes of a PettingZoo"):
        config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}}, evaluation={"every_env_steps": 1000})
