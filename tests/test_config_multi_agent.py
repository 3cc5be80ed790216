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


TWO = {"policies": {"a": {"algo": {"lr": 1e-3}}, "b": {"model": {"hidden_sizes": [16]}}},
       "policy_mapping": {"agent_0": "a", "*": "b"}}


def test_each_policy_is_the_run_with_its_own_algo_and_model_sections():
    views = config(TWO, algo={"lr": 5e-4}, model={"hidden_sizes": [32, 32]}).policy_configs()
    assert list(views) == ["a", "b"]
    assert (views["a"].algo.lr, views["a"].model.hidden_sizes) == (1e-3, [32, 32])
    assert (views["b"].algo.lr, views["b"].model.hidden_sizes) == (5e-4, [16])


def test_a_policys_bad_section_is_named_with_the_policy():
    bad = {**TWO, "policies": {"a": {"algo": {"clip_cof": 0.2}}, "b": {}}}
    with pytest.raises(ConfigError, match=r"multi_agent.policies.a.algo.clip_cof: unknown field \(did you mean 'clip_coef'\?\)"):
        config(bad)


@pytest.mark.parametrize(("sections", "field"), [
    ({"env": {**SPREAD, "normalize_obs": True}}, r"env.normalize_obs: not supported with several policies"),
    ({"store": {"transport": "store"}}, r"store.transport=store: several policies"),
    ({"sync": {"durable": True}}, r"sync.durable: not supported with several policies"),
    ({"monitor": {"prometheus": {"enabled": True}}}, r"monitor.migration.enabled: moving a policy's learner"),
])
def test_what_several_policies_do_not_support_yet_is_refused_naming_the_field(sections, field):
    with pytest.raises(ConfigError, match=field):
        config(TWO, **sections)


def test_policies_to_train_may_leave_policies_frozen_but_not_all():
    cfg = config({**TWO, "policies_to_train": ["b"]})
    assert (cfg.multi_agent.trains("a"), cfg.multi_agent.trains("b")) == (False, True)
    with pytest.raises(ConfigError, match=r"policies_to_train: empty, so nothing would train"):
        config({**TWO, "policies_to_train": []})


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


def test_evaluation_during_training_is_refused_with_one_policy_over_the_agents():
    with pytest.raises(ConfigError, match=r"evaluation.every_env_steps: evaluation episodes of a PettingZoo "
                                          r"environment with one policy"):
        config({"policies": {"shared": {}}, "policy_mapping": {"*": "shared"}}, evaluation={"every_env_steps": 1000})


def test_evaluation_judges_a_named_policy_of_several_and_refuses_an_unknown_one():
    two = {"policies": {"top": {}, "bottom": {}}, "policy_mapping": {"high": "top", "low": "bottom"}}
    cfg = config(two, evaluation={"every_env_steps": 1000, "keep_best": True, "policy": "top"})
    assert cfg.evaluation.policy == "top"
    with pytest.raises(ConfigError, match=r"evaluation.policy: 'ghost' is not in multi_agent.policies"):
        config(two, evaluation={"every_env_steps": 1000, "policy": "ghost"})
    with pytest.raises(ConfigError, match=r"evaluation.policy='top': names one of several policies"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "evaluation": {"every_env_steps": 1000, "policy": "top"}})


LEVELS = {"policies": {"top": {}, "bottom": {}}, "policy_mapping": {"high": "top", "low": "bottom"}}


def test_hierarchy_names_two_declared_policies_as_its_levels():
    cfg = config(LEVELS | {"hierarchy": {"high": "top", "low": "bottom"}})
    assert (cfg.multi_agent.hierarchy.high, cfg.multi_agent.hierarchy.option_reward) == ("top", "sum")
    assert all(view.multi_agent.hierarchy is None for view in cfg.policy_configs().values())  # a level is one policy


def test_a_hierarchy_level_that_is_not_a_policy_is_named():
    with pytest.raises(ConfigError, match=r"hierarchy.low: 'ghost' is not in multi_agent.policies \(bottom, top\)"):
        config(LEVELS | {"hierarchy": {"high": "top", "low": "ghost"}})


def test_a_hierarchy_whose_levels_are_one_policy_is_an_error():
    with pytest.raises(ConfigError, match=r"hierarchy.low: 'top' is also the high level"):
        config(LEVELS | {"hierarchy": {"high": "top", "low": "top"}})


def test_an_unknown_option_reward_is_named():
    with pytest.raises(ConfigError, match=r"option_reward"):
        config(LEVELS | {"hierarchy": {"high": "top", "low": "bottom", "option_reward": "max"}})


def test_the_rooms_examples_are_one_task_and_one_budget_with_and_without_levels():
    from pathlib import Path

    from kilorl.config import load_config

    examples = Path(__file__).resolve().parent.parent / "examples"
    levels, flat = load_config(examples / "rooms_hierarchical.yaml"), load_config(examples / "rooms_ppo.yaml")
    assert (levels.multi_agent.hierarchy.high, levels.multi_agent.hierarchy.low) == ("high", "low")
    assert levels.env.kwargs["env"] == flat.env.id
    assert flat.env.kwargs.items() <= levels.env.kwargs["env_kwargs"].items()  # the option bonus is the levels' only
    assert levels.train.total_env_steps == flat.train.total_env_steps
    assert levels.algo == flat.algo and levels.model == flat.model
