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
