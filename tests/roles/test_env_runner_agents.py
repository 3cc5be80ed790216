"""An env runner on a PettingZoo environment: agents are columns of the [T, N] step record with
an alive mask, env steps count copies, and the rollout info carries each agent's returns."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.algos import keys
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config

SCRIPTED = "tests.envs.scripted_agents:parallel_env"


def scripted_config(**algo):
    return tiny_config(env={"id": SCRIPTED, "max_num_agents": 2},
                       algo={"rollout_length": 6, "num_minibatches": 1, "update_epochs": 1} | algo,
                       parallelism={"actor": 1, "envs_per_actor": 2})


def test_agents_are_columns_with_an_alive_mask_and_env_steps_count_copies():
    cfg = scripted_config()
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    runner = EnvRunner(cfg, store, 0, seed=0)
    rollout, info = runner.collect(0)
    assert rollout.shape == (6, 4)  # 2 copies x 2 agent slots
    one_copy = [[True, True], [True, True], [False, True], [True, True], [True, True], [True, True]]
    np.testing.assert_array_equal(rollout.steps[keys.ALIVE], np.concatenate([one_copy, one_copy], axis=1))
    np.testing.assert_array_equal(rollout.steps[keys.REWARDS][:, :2], [[1, 10], [1, 10], [0, 10], [100, 10],
                                                                        [100, 10], [1, 10]])
    assert info["env_steps"] == 6 * 2
    assert info["episode_returns"] == [252.0, 252.0] and info["episode_lengths"] == [5, 5]
    assert info["agent_returns"] == {"a_0": [2.0, 2.0], "a_1": [50.0, 50.0], "late": [200.0, 200.0]}
    np.testing.assert_array_equal(rollout.final[keys.FINAL_T], [1, 1, 4, 4, 4, 4])  # a_0 early, then the rest
    stats = learner.update(1, info["env_steps"], rollout)
    assert np.isfinite(stats["policy_loss"])


def test_an_algorithm_that_does_not_mask_dead_agents_is_refused_on_a_pettingzoo_env():
    cfg = tiny_config(env={"id": SCRIPTED, "max_num_agents": 2}, algo={"name": "a2c"},
                      parallelism={"actor": 1, "envs_per_actor": 1})
    with pytest.raises(ValueError, match=r"PettingZoo environment, and algo.name='a2c' does not mask dead agent"):
        EnvRunner(cfg, InMemoryParameterStore(), 0, seed=0)


SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}
MAPPO = {"policies": {"shared": {}}, "policy_mapping": {"agent_*": "shared"}, "centralized_critic": "state"}


def test_mappo_columns_carry_the_global_state_and_train_one_network():
    cfg = tiny_config(env=SPREAD, multi_agent=MAPPO, model={"actor_inputs": 18},
                      algo={"rollout_length": 4, "num_minibatches": 1, "update_epochs": 1},
                      parallelism={"actor": 1, "envs_per_actor": 1})
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    rollout, info = EnvRunner(cfg, store, 0, seed=0).collect(0)
    assert rollout.steps[keys.OBS].shape == (4, 3, 18 + 54)
    np.testing.assert_array_equal(rollout.steps[keys.OBS][:, 0, 18:], rollout.steps[keys.OBS][:, 2, 18:])  # one state
    assert np.isfinite(learner.update(1, info["env_steps"], rollout)["value_loss"])


def test_a_policy_input_other_than_one_agents_observation_is_refused_at_start_up():
    cfg = tiny_config(env=SPREAD, multi_agent=MAPPO, model={"actor_inputs": 20},
                      parallelism={"actor": 1, "envs_per_actor": 1})
    with pytest.raises(ValueError, match=r"model.actor_inputs=20: .* must be one agent's observation size, 18"):
        EnvRunner(cfg, InMemoryParameterStore(), 0, seed=0)
