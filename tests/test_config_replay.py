"""The ``replay_buffer`` section: the users' form accepted as written, misuse named."""

from __future__ import annotations

import pytest

from kilorl.config import ConfigError, config_from_dict

DQN = {"env": {"id": "CartPole-v1"}, "algo": {"name": "dqn"}, "sync": {"mode": "async"}}


def test_the_users_form_is_accepted_as_written():
    cfg = config_from_dict({**DQN, "replay_buffer": {"sharding": True, "compression": "zstd"}})
    rb = cfg.replay_buffer
    assert (rb.backend, rb.sharding, rb.compression, rb.capacity) == ("store", True, "zstd", None)
    assert config_from_dict(DQN).replay_buffer is None  # without it: the learner's own table


def test_the_section_with_an_on_policy_algorithm_is_an_error_naming_it():
    with pytest.raises(ConfigError, match=r"replay_buffer: algo.name=ppo is on the on_policy data path"):
        config_from_dict({"env": {"id": "CartPole-v1"}, "replay_buffer": {"compression": "zstd"}})


def test_an_unknown_codec_names_the_field():
    with pytest.raises(ConfigError, match="replay_buffer.compression"):
        config_from_dict({**DQN, "replay_buffer": {"compression": "gzip"}})


def test_prioritized_rate_limited_n_step_options_are_accepted_and_n_step_reaches_the_algorithm():
    cfg = config_from_dict({**DQN, "replay_buffer": {
        "prioritized": {"alpha": 0.5, "beta": 0.4, "beta_final": 1.0}, "samples_per_insert": 8,
        "min_size_to_sample": 500, "n_step": 3, "shards": 2, "durable": True}})
    rb = cfg.replay_buffer
    assert (rb.prioritized.alpha, rb.samples_per_insert, rb.min_size_to_sample, rb.shards, rb.durable) == \
        (0.5, 8, 500, 2, True)
    assert cfg.algo.n_step == 3  # the adder reads its own section
    assert rb.prioritized.beta_at(0.5) == pytest.approx(0.7)


@pytest.mark.parametrize(("section", "field"), [
    ({"prioritized": {"beta": 1.5}}, "replay_buffer.prioritized.beta"),
    ({"prioritized": {"alfa": 0.5}}, "replay_buffer.prioritized.alfa"),
    ({"samples_per_insert": 0}, "replay_buffer.samples_per_insert"),
    ({"min_size_to_sample": 0}, "replay_buffer.min_size_to_sample"),
    ({"n_step": 0}, "replay_buffer.n_step"),
    ({"shards": 0}, "replay_buffer.shards"),
    ({"capacity": 100, "min_size_to_sample": 101}, "replay_buffer.min_size_to_sample"),
    ({"backend": "learner", "prioritized": {}}, "replay_buffer.prioritized"),
    ({"backend": "learner", "samples_per_insert": 4}, "replay_buffer.samples_per_insert"),
    ({"backend": "learner", "frame_stack": 4}, "replay_buffer.frame_stack"),
    ({"frame_stack": 1}, "replay_buffer.frame_stack"),
])
def test_bad_replay_buffer_options_are_errors_naming_the_field(section, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config_from_dict({**DQN, "replay_buffer": section})


def test_options_that_contradict_the_algorithm_name_both_fields():
    with pytest.raises(ConfigError, match=r"replay_buffer\.n_step: 3 contradicts algo\.n_step=2"):
        config_from_dict({**DQN, "algo": {"name": "dqn", "n_step": 2}, "replay_buffer": {"n_step": 3}})
    with pytest.raises(ConfigError, match=r"replay_buffer\.min_size_to_sample: 2000 exceeds .* 1000 \(algo\.buffer_size\)"):
        config_from_dict({**DQN, "algo": {"name": "dqn", "buffer_size": 1000},
                          "replay_buffer": {"min_size_to_sample": 2000}})
    same = config_from_dict({**DQN, "algo": {"name": "dqn", "n_step": 3}, "replay_buffer": {"n_step": 3}})
    assert same.algo.n_step == 3


SAC = {"env": {"id": "Pendulum-v1"}, "algo": {"name": "sac"}, "sync": {"mode": "async"}}


def test_no_actor_is_accepted_with_a_dataset_that_fills_every_batch():
    cfg = config_from_dict({**SAC, "parallelism": {"actor": 0},
                            "replay_buffer": {"backend": "learner", "offline": {"path": "ds", "ratio": 1.0}}})
    assert cfg.parallelism.actor == 0 and cfg.rollout_steps > 0  # the step clock still advances


@pytest.mark.parametrize(("data", "message"), [
    ({"env": {"id": "CartPole-v1"}}, r"parallelism.actor=0: algo.name=ppo is on the on_policy data path"),
    (SAC, r"parallelism.actor=0: no env runner and no replay_buffer.offline dataset"),
    ({**SAC, "replay_buffer": {"offline": {"path": "ds", "ratio": 0.5}}},
     r"parallelism.actor=0: replay_buffer.offline.ratio=0.5 leaves 0.5 of every batch to online rows"),
])
def test_no_actor_without_a_dataset_for_every_row_is_an_error_naming_the_fields(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({**data, "parallelism": {"actor": 0}})
