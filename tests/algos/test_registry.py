"""Algorithms are registered by name; the config's algo section is chosen by algo.name."""

from __future__ import annotations

import pytest

from kilorl.algos import AlgorithmSpec, get, names, register
from kilorl.algos.a2c.config import A2CConfig
from kilorl.algos.ppo.config import PPOConfig
from kilorl.config import ConfigError, config_from_dict
from kilorl.core import AlgorithmLearner, StepRecorder


def test_ppo_and_a2c_are_registered_with_loadable_parts():
    assert {"ppo", "a2c"} <= set(names())
    for name, config in (("ppo", PPOConfig), ("a2c", A2CConfig)):
        spec = get(name)
        assert spec.load("config") is config and spec.data_path == "on_policy"
        assert issubclass(spec.load("learner"), AlgorithmLearner)
        assert issubclass(spec.load("recorder"), StepRecorder)


def test_unknown_algorithm_lists_the_registered_ones():
    with pytest.raises(KeyError, match="unknown algorithm 'dqn'; registered: .*a2c.*ppo"):
        get("dqn")
    with pytest.raises(ConfigError, match=r"algo\.name: unknown algorithm 'dqn'"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"name": "dqn"}})


def test_a_name_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="already registered"):
        register(AlgorithmSpec("ppo", "x:C", "x:L", "x:R"))


def test_algo_name_selects_which_fields_are_allowed():
    cfg = config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"name": "a2c", "optimizer": "adam"}})
    assert isinstance(cfg.algo, A2CConfig) and cfg.algo.optimizer == "adam"
    assert isinstance(config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"lr": 1e-3}}).algo, PPOConfig)
    with pytest.raises(ConfigError, match=r"algo\.clip_coef: unknown field.*allowed: .*optimizer"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"name": "a2c", "clip_coef": 0.1}})
