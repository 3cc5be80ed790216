"""Config validation: every mistake is an error that names the field."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError, apply_overrides, config_from_dict, load_config
from tests.conftest import EXAMPLES


def test_defaults_fill_every_section():
    cfg = config_from_dict({"env": {"id": "CartPole-v1"}})
    assert cfg.algo.name == "ppo"
    assert cfg.parallelism.actor == 1 and cfg.parallelism.parameter_server == 1
    assert cfg.train.gradient_accumulation_steps == 1 and cfg.train.mixed_precision == "no"


def test_every_field_is_documented():
    from kilorl.config import Config

    def walk(model, prefix=""):
        for name, field in model.model_fields.items():
            assert field.description, f"{prefix}{name} has no docstring"
            sub = field.annotation
            if hasattr(sub, "model_fields"):
                walk(sub, f"{prefix}{name}.")

    walk(Config)


def test_unknown_key_is_named_with_allowed_values():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"learning_rate": 1e-3}})
    msg = str(err.value)
    assert "algo.learning_rate" in msg and "unknown field" in msg and "lr" in msg


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match=r"optimizer: unknown field"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "optimizer": {}})


@pytest.mark.parametrize("monitor, field, named", [
    ({"memory_budget_bytes": {"actr": 2**31}}, "monitor.memory_budget_bytes", "key 'actr'"),
    ({"inject_leaks": [{"role": "lerner", "bytes_per_s": 1e6}]}, "monitor.inject_leaks.0.role", "'lerner'"),
])
def test_a_memory_budget_or_injected_leak_naming_no_role_is_an_error_listing_the_roles(monitor, field, named):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"env": {"id": "CartPole-v1"}, "monitor": monitor})
    msg = str(err.value)
    assert f"{field}: " in msg and named in msg and "roles: actor, learner, store" in msg and "did you mean" in msg


def test_an_injected_leak_on_a_rank_the_run_does_not_have_is_an_error():
    leak = {"role": "learner", "rank": 1, "bytes_per_s": 1e6}
    with pytest.raises(ConfigError, match=r"monitor\.inject_leaks\.0\.rank=1: the run has 1 learner"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "monitor": {"inject_leaks": [leak]}})
    ok = config_from_dict({"env": {"id": "CartPole-v1"}, "parallelism": {"actor": 2, "learner": 2},
                           "monitor": {"inject_leaks": [leak], "memory_budget_bytes": {"store": 2**31}}})
    assert ok.monitor.inject_leaks[0].rank == 1


def test_wrong_type_is_named():
    with pytest.raises(ConfigError, match=r"parallelism\.actor: .*integer.*'many'"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "parallelism": {"actor": "many"}})


def test_literal_lists_allowed_values():
    with pytest.raises(ConfigError, match=r"train\.mixed_precision: Input should be 'no' or 'bf16'"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "train": {"mixed_precision": "fp8"}})


def test_bad_env_id_is_named_with_suggestion():
    with pytest.raises(ConfigError, match=r"env\.id: unknown Gymnasium environment 'CartPol-v1'; did you mean CartPole-v1"):
        config_from_dict({"env": {"id": "CartPol-v1"}})


def test_bad_entry_point_is_named():
    with pytest.raises(ConfigError, match=r"env\.id: cannot load entry point 'no_such_pkg.envs:Thing'"):
        config_from_dict({"env": {"id": "no_such_pkg.envs:Thing"}})


def test_entry_point_env_is_accepted():
    cfg = config_from_dict({"env": {"id": "gymnasium.envs.classic_control.cartpole:CartPoleEnv"}})
    assert cfg.env.id.endswith(":CartPoleEnv")


def test_minibatches_must_divide_the_batch():
    with pytest.raises(ConfigError, match="num_minibatches=3 must divide the rollout batch 1024"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "algo": {"num_minibatches": 3}})


def test_stopping_on_evaluation_needs_an_evaluation_cadence():
    with pytest.raises(ConfigError, match="evaluation.stop_return needs evaluation.every_env_steps"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "evaluation": {"stop_return": 490}})
    with pytest.raises(ConfigError, match="evaluation.keep_best needs evaluation.every_env_steps"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "evaluation": {"keep_best": True}})
    with pytest.raises(ConfigError, match="evaluation.stop_consecutive"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "evaluation": {"every_env_steps": 1000, "stop_consecutive": 0}})
    with pytest.raises(ConfigError, match="evaluation.episodes"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "evaluation": {"every_env_steps": 1000, "episodes": 0}})


def test_overrides_parse_yaml_values():
    data = apply_overrides({"env": {"id": "x"}}, ["algo.lr=1e-3", "model.hidden_sizes=[32, 16]", "env.normalize_obs=true"])
    assert data["algo"]["lr"] == pytest.approx(1e-3)
    assert data["model"]["hidden_sizes"] == [32, 16]
    assert data["env"]["normalize_obs"] is True


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_shipped_example_loads(example):
    cfg = load_config(EXAMPLES / example)
    assert cfg.train.total_env_steps > 0


def test_cli_exits_2_naming_the_field(tmp_path, kilorl_cli):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: CartPole-v1\nalgo:\n  clip_coeff: 0.1\n")
    res = kilorl_cli("train", str(bad))
    assert res.returncode == 2
    assert "algo.clip_coeff" in res.stderr and "clip_coef" in res.stderr

    res = kilorl_cli("train", str(EXAMPLES / "cartpole_ppo.yaml"), "-o", "train.total_env_steps=lots")
    assert res.returncode == 2 and "train.total_env_steps" in res.stderr

    bad.write_text("env:\n  id: NoSuchEnv-v9\n")
    res = kilorl_cli("train", str(bad))
    assert res.returncode == 2 and "env.id" in res.stderr and "NoSuchEnv-v9" in res.stderr


def test_user_train_keys_validate_as_written():
    cfg = config_from_dict({"env": {"id": "CartPole-v1"}, "train": {
        "gradient_accumulation_steps": 4, "pipeline_depth": 8, "overlap_compute_comm": True, "mixed_precision": "bf16"}})
    assert (cfg.train.gradient_accumulation_steps, cfg.train.pipeline_depth) == (4, 8)
    assert cfg.train.overlap_compute_comm is True and cfg.train.mixed_precision == "bf16"


def test_pipeline_depth_has_no_artificial_maximum_but_must_be_non_negative():
    assert config_from_dict({"env": {"id": "CartPole-v1"}, "train": {"pipeline_depth": 64}}).train.pipeline_depth == 64
    with pytest.raises(ConfigError, match=r"train\.pipeline_depth: .*greater than or equal to 0"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "train": {"pipeline_depth": -1}})


def test_the_store_reconnect_deadline_is_generous_by_default_and_must_be_positive():
    assert config_from_dict({"env": {"id": "CartPole-v1"}}).store.reconnect_timeout_s == 60.0
    with pytest.raises(ConfigError, match=r"store\.reconnect_timeout_s: .*greater than 0"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "store": {"reconnect_timeout_s": 0}})


def test_moved_field_names_its_new_place():
    with pytest.raises(ConfigError, match=r"parallelism\.pipeline_depth: moved to train\.pipeline_depth"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "parallelism": {"pipeline_depth": 1}})


def test_deep_pipeline_on_a_short_run_is_warned_about():
    from kilorl.trainer.trainer import config_warnings

    cfg = config_from_dict({"env": {"id": "CartPole-v1"}, "train": {"pipeline_depth": 8, "total_env_steps": 2048}})
    assert any("pipeline_depth=8 is not below the run's 2 iteration" in w for w in config_warnings(cfg))


def test_every_algorithm_field_is_documented():
    from kilorl.algos import get, names

    for name in names():
        config = get(name).load("config")
        for field_name, field in config.model_fields.items():
            assert field.description, f"algo ({name}).{field_name} has no docstring"


@pytest.mark.parametrize(("written", "read"), [("sync", "in_process"), ("async", "subprocesses"),
                                               ("subprocesses", "subprocesses")])
def test_the_vector_env_of_an_older_run_directory_reads_as_its_new_name(written, read):
    cfg = config_from_dict({"env": {"id": "CartPole-v1"}, "parallelism": {"vector_env": written}})
    assert cfg.parallelism.vector_env == read
