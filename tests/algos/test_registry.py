"""Algorithms are registered by name; the config's algo section is chosen by algo.name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kilorl.algos import AlgorithmSpec, get, names, register
from kilorl.algos.a2c.config import A2CConfig
from kilorl.algos.api import AlgorithmLearner, BehaviourPolicy
from kilorl.algos.dqn.config import DQNConfig
from kilorl.algos.ppo.config import PPOConfig
from kilorl.config import ConfigError, config_from_dict


def test_ppo_a2c_and_dqn_are_registered_with_loadable_parts_and_their_data_paths():
    assert {"ppo", "a2c", "dqn"} <= set(names())
    for name, config, path in (("ppo", PPOConfig, "on_policy"), ("a2c", A2CConfig, "on_policy"),
                               ("dqn", DQNConfig, "replay")):
        spec = get(name)
        assert spec.load("config") is config and spec.data_path == path == config.data_path
        assert issubclass(spec.load("learner"), AlgorithmLearner)
        assert issubclass(spec.load("policy"), BehaviourPolicy)


def test_unknown_algorithm_lists_the_registered_ones():
    with pytest.raises(KeyError, match="unknown algorithm 'sarsa'; registered: .*a2c.*dqn.*ppo"):
        get("sarsa")
    with pytest.raises(ConfigError, match=r"algo\.name: unknown algorithm 'sarsa'"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"name": "sarsa"}})


@pytest.mark.parametrize(("algo", "field"), [({"name": "ppo", "buffer_size": 1000}, "buffer_size"),
                                             ({"name": "dqn", "gae_lambda": 0.9}, "gae_lambda")])
def test_an_option_of_the_other_data_path_names_the_field_and_the_algorithm(algo, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}: an option of the .* data path .*algo\.name={algo['name']}"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": algo})


@pytest.mark.parametrize(("sections", "field"), [
    ({"algo": {"name": "dqn"}, "env": {"id": "CartPole-v1", "normalize_obs": True}}, "env.normalize_obs"),
    ({"algo": {"name": "ppo"}, "model": {"dueling": True}}, "model.dueling"),
])
def test_section_options_the_algorithm_cannot_honour_are_refused_by_name(sections, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config_from_dict({"env": {"id": "CartPole-v1"}, **sections})


def test_a_name_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="already registered"):
        register(AlgorithmSpec("ppo", "x:C", "x:L", "x:P"))


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
                       learner="kilorl.algos.a2c.learner:A2CLearner", policy="kilorl.algos.a2c.policy:A2CPolicy"))
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
