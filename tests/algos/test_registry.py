"""Algorithms are registered by name; the config's algo section is chosen by algo.name."""

from __future__ import annotations

import os
import subprocess
import sys

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


PLUGIN = '''
from typing import Literal

from kilorl.algos.config_base import OnPolicyConfig
from kilorl.algos.registry import AlgorithmSpec, register


class VPGConfig(OnPolicyConfig):
    name: Literal["vpg"] = "vpg"
    baseline: bool = True


register(AlgorithmSpec(name="vpg", config="kilorl_vpg_plugin:VPGConfig",
                       learner="kilorl.algos.a2c.learner:A2CLearner", recorder="kilorl.algos.a2c.recorder:A2CRecorder"))
'''


def test_an_installed_plugin_registers_an_algorithm_and_its_config_section(tmp_path):
    """A package with a ``kilorl.algorithms`` entry point adds an algorithm: no kiloRL file changes."""
    (tmp_path / "kilorl_vpg_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "kilorl_vpg_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kilorl-vpg-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kilorl.algorithms]\nvpg = kilorl_vpg_plugin\n")
    code = ("from kilorl.config import config_from_dict, ConfigError\n"
            "cfg = config_from_dict({'env': {'id': 'CartPole-v1'}, 'algo': {'name': 'vpg', 'baseline': False}})\n"
            "print(type(cfg.algo).__name__, cfg.algo.baseline)\n"
            "try:\n    config_from_dict({'env': {'id': 'CartPole-v1'}, 'algo': {'name': 'vpg', 'clip_coef': 0.1}})\n"
            "except ConfigError as e:\n    print('refused:', e)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines()[0] == "VPGConfig False"
    assert "algo.clip_coef: unknown field" in out and "baseline" in out
