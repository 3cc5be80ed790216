"""Env groups (``parallelism.env_groups``): an env runner's envs cut into groups that step one
after another, one group stepping while the policy acts on the next. The step record is the
one the runner keeps without groups, column for column, whatever the groups and whether they
step in subprocesses; the behaviour policy's per-env state stays with its envs; each rollout
says where its time went."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, State
from kilorl.config import ConfigError
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from kilorl.trainer.reporting import collect_shares
from tests.conftest import tiny_config
from tests.envs.scripted import expected_steps

T, LENGTH = 7, 3


class GreedyCounting(BehaviourPolicy):
    """Deterministic (the greedy action, no random draw) with a per-env step counter as its
    state, zeroed where an episode ends: a grouped runner must keep every row with its env."""

    def initial_state(self, n: int) -> State:
        return {"count": np.zeros(n, np.int64)}

    def act(self, model, obs, state, ctx):
        return model.policy(obs, True), {}, {"count": state["count"] + 1}

    def reset(self, state: State, done: np.ndarray) -> State:
        return {"count": np.where(done, 0, state["count"])}


def _runner(env: dict, n: int, groups: int, vector_env: str = "in_process", algo: str = "impala") -> EnvRunner:
    cfg = tiny_config(env=env, algo={"name": algo, "rollout_length": T},
                      parallelism={"envs_per_actor": n, "env_groups": groups, "vector_env": vector_env})
    store = InMemoryParameterStore()
    LearnerRole(cfg, store).publish(0)
    return EnvRunner(cfg, store, 0, seed=5)


def _same_record(a, b) -> None:
    assert a.steps.keys() == b.steps.keys()
    for k in a.steps:
        np.testing.assert_array_equal(a.steps[k], b.steps[k], err_msg=k)
    for part in ("final", "last", "state"):
        x, y = getattr(a, part), getattr(b, part)
        assert x.keys() == y.keys(), part
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"{part}[{k}]")


@pytest.mark.parametrize("vector_env", ["in_process", "subprocesses"])
def test_two_groups_record_every_step_as_the_script_says(vector_env):
    runner = _runner({"id": "tests.envs.scripted:ScriptedEnv", "kwargs": {"length": LENGTH}}, 4, 2, vector_env)
    try:
        first, second = runner.collect(0)[0], runner.collect(0)[0]
    finally:
        runner.close()
    script = expected_steps(LENGTH, 2 * T + 1)
    for r, rollout in enumerate((first, second)):
        finals = {(int(t), int(e)): tuple(o) for t, e, o in
                  zip(rollout.final[keys.FINAL_T], rollout.final[keys.FINAL_ENV], rollout.final[keys.OBS])}
        for t in range(T):
            obs, reward, term, trunc, after = script[r * T + t]
            for env in range(4):
                assert tuple(rollout.steps[keys.OBS][t, env]) == obs
                assert rollout.steps[keys.REWARDS][t, env] == reward
                assert (rollout.steps[keys.TERMINATED][t, env], rollout.steps[keys.TRUNCATED][t, env]) == (term, trunc)
                assert finals.get((t, env)) == (after if term or trunc else None)
        assert list(rollout.final[keys.FINAL_T]) == sorted(rollout.final[keys.FINAL_T])  # time order, as one group


@pytest.mark.parametrize(("groups", "vector_env"), [(2, "in_process"), (4, "in_process"), (2, "subprocesses")])
def test_groups_keep_the_record_and_the_policy_state_of_one_group_column_for_column(groups, vector_env):
    """CartPole (the actions matter) with a deterministic policy that counts steps per env:
    grouped and ungrouped runners make the same rollouts, state included."""
    runners = [_runner({"id": "CartPole-v1"}, 4, g, v) for g, v in ((1, "in_process"), (groups, vector_env))]
    try:
        for runner in runners:
            runner.policy = GreedyCounting(runner.cfg.algo, runner.context)
            runner.state = runner.policy.initial_state(4)
        ended: set[int] = set()
        for _ in range(40):  # until episodes have ended in every env, inside rollouts
            plain, grouped = (r.collect(0)[0] for r in runners)
            _same_record(plain, grouped)
            np.testing.assert_array_equal(runners[0].state["count"], runners[1].state["count"])
            ended |= set(plain.final[keys.FINAL_ENV].tolist())
            if len(ended) == 4:
                break
        assert ended == {0, 1, 2, 3}
    finally:
        for runner in runners:
            runner.close()


def test_a_rollout_says_where_its_time_went():
    runner = _runner({"id": "CartPole-v1"}, 4, 2)
    info = runner.collect(0)[1]
    runner.close()
    assert info["env_step_s"] > 0 and info["inference_s"] > 0
    assert info["env_step_s"] + info["inference_s"] <= info["collect_s"]


def test_collect_shares_divide_the_runners_time_and_name_the_handoff_only_when_timed():
    base = {"actor": 0, "version": 0, "env_steps": 8, "episode_returns": [], "episode_lengths": []}
    infos = [{**base, "collect_s": 3.0, "wait_s": 1.0, "env_step_s": 1.5, "inference_s": 1.0},
             {**base, "collect_s": 1.0, "wait_s": 0.0, "env_step_s": 0.5, "inference_s": 0.5}]
    shares = collect_shares(infos)
    assert shares == pytest.approx({"collect_share_env": 0.4, "collect_share_inference": 0.3,
                                    "collect_share_other": 0.1, "collect_share_wait": 0.2})
    with_handoff = collect_shares([{**infos[0], "handoff_s": 1.0}])
    assert with_handoff["collect_share_handoff"] == pytest.approx(0.2)
    assert sum(with_handoff.values()) == pytest.approx(1.0)
    assert collect_shares([{**base, "collect_s": 1.0, "wait_s": 0.0}]) == {}  # a runner that did not time its stages


def test_groups_that_do_not_divide_the_envs_are_refused_naming_both_fields():
    with pytest.raises(ConfigError, match=r"parallelism\.envs_per_actor=6 must be a multiple of parallelism\.env_groups=4"):
        tiny_config(parallelism={"envs_per_actor": 6, "env_groups": 4})


def test_greedy_counting_is_deterministic():
    """The reference policy above draws nothing at random (else the comparison would be luck)."""
    runner = _runner({"id": "CartPole-v1"}, 2, 1)
    policy = GreedyCounting(runner.cfg.algo, runner.context)
    obs = torch.zeros(2, 4)
    a = policy.act(runner.model, obs, policy.initial_state(2), None)[0]
    b = policy.act(runner.model, obs, policy.initial_state(2), None)[0]
    runner.close()
    assert torch.equal(a, b)
