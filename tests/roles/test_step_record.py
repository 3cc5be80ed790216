"""The step record an env runner keeps, checked step by step against a scripted environment:
observations in the env's dtype, terminated and truncated apart, each finished episode's
real final observation, s_T, and the behaviour policy's declared extras."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, Extra
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from kilorl.roles.step_record import check_extras
from tests.conftest import tiny_config
from tests.envs.scripted import expected_steps

T, N, LENGTH = 7, 2, 3


def _runner(algo: str = "ppo"):
    fields = {"name": algo, "rollout_length": T} | ({"num_minibatches": 1} if algo == "ppo" else {})
    cfg = tiny_config(env={"id": "tests.envs.scripted:ScriptedEnv", "kwargs": {"length": LENGTH}},
                      algo=fields, parallelism={"envs_per_actor": N})
    store = InMemoryParameterStore()
    LearnerRole(cfg, store).publish(0)
    return EnvRunner(cfg, store, 0, seed=0)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_two_rollouts_record_every_step_as_the_script_says(algo):
    runner = _runner(algo)
    first, second = runner.collect(0)[0], runner.collect(0)[0]
    script = expected_steps(LENGTH, 2 * T + 1)
    for r, rollout in enumerate((first, second)):
        steps = rollout.steps
        assert steps[keys.OBS].dtype == np.uint8 and steps[keys.TERMINATED].dtype == bool
        finals = {(int(t), int(e)): tuple(o) for t, e, o in
                  zip(rollout.final[keys.FINAL_T], rollout.final[keys.FINAL_ENV], rollout.final[keys.OBS])}
        for t in range(T):
            obs, reward, term, trunc, after = script[r * T + t]
            for env in range(N):  # every env follows the same script
                assert tuple(steps[keys.OBS][t, env]) == obs
                assert steps[keys.REWARDS][t, env] == reward
                assert (steps[keys.TERMINATED][t, env], steps[keys.TRUNCATED][t, env]) == (term, trunc)
                assert finals.get((t, env)) == (after if term or trunc else None)
        s_T = script[r * T + T][0]  # the observation the next step acts on (a reset one after an end)
        assert all(tuple(o) == s_T for o in rollout.last[keys.OBS])
    np.testing.assert_array_equal(first.last[keys.OBS], second.steps[keys.OBS][0])  # s_T is where the next starts
    assert first.env_steps == T * N and first.state == {}


def test_ppos_policy_records_values_of_the_final_observations_and_of_s_T():
    runner = _runner("ppo")
    rollout = runner.collect(0)[0]
    k = len(rollout.final[keys.FINAL_T])
    assert k > 0 and rollout.final[keys.VALUES].shape == (k,) and rollout.last[keys.VALUES].shape == (N,)
    expected = runner.model.value(torch.from_numpy(rollout.final[keys.OBS])).detach().numpy()
    np.testing.assert_allclose(rollout.final[keys.VALUES], expected, rtol=1e-6)


class _Declared(BehaviourPolicy):
    extras = {"score": Extra((2,), "float32")}

    def act(self, model, obs, state, ctx):
        raise AssertionError("not called")


@pytest.mark.parametrize(("got", "message"), [
    ({"score": np.zeros((4, 2), np.float64)}, r"extra 'score' is declared float32 \[2\] per env, act returned float64"),
    ({"score": np.zeros((4, 3), np.float32)}, r"extra 'score' is declared float32 \[2\].*float32 \[3\]"),
    ({"score": np.zeros((4, 2), np.float32), "other": np.zeros(4)}, r"\['other'\] not declared"),
    ({}, r"declared \['score'\] not returned"),
])
def test_extras_that_break_their_declaration_are_refused_naming_the_entry(got, message):
    with pytest.raises(ValueError, match=message):
        check_extras("_Declared", _Declared.extras, got, 4)
    check_extras("_Declared", _Declared.extras, {"score": np.zeros((4, 2), np.float32)}, 4)
