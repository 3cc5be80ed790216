"""The high level of a two-level policy collects one row per option: the decision step's
observation, action and extras, the option's rewards summed, the end of the episode where the
option ended it; options still running at a rollout's end carry into the next."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.algos import keys
from kilorl.core import Rollout
from kilorl.roles.option_rollouts import HierarchicalEnvRunner, OptionRecorder
from kilorl.roles.parameter_store import InMemoryParameterStore
from kilorl.roles.policy_learners import PolicyLearners
from tests.conftest import tiny_config


def record(decisions: list[int], rewards: list[float], ends: dict[int, str] | None = None) -> tuple[Rollout, np.ndarray]:
    """One column's per-step cut: ``obs`` and ``values`` are the step number, decisions on
    the listed steps, ``ends``: step -> "terminated" | "truncated"."""
    T = len(rewards)
    t = np.arange(T, dtype=np.float32)[:, None]
    steps = {keys.OBS: t[..., None].copy(), keys.ACTIONS: np.arange(T)[:, None] % 4, keys.VALUES: t.copy(),
             keys.LOGP: -t, keys.REWARDS: np.array(rewards, np.float32)[:, None],
             keys.TERMINATED: np.zeros((T, 1), bool), keys.TRUNCATED: np.zeros((T, 1), bool),
             keys.ALIVE: np.ones((T, 1), bool)}
    for step, how in (ends or {}).items():
        steps[how][step, 0] = True
    decision = np.zeros((T, 1), bool)
    decision[decisions, 0] = True
    final_t = np.array(sorted(ends or {}), np.int64)
    final = {keys.FINAL_T: final_t, keys.FINAL_ENV: np.zeros(len(final_t), np.int64),
             keys.OBS: np.full((len(final_t), 1), 99.0, np.float32), keys.VALUES: np.full(len(final_t), 7.0)}
    last = {keys.OBS: np.full((1, 1), float(T), np.float32), keys.LAST_VALUES: np.full(1, -1.0, np.float32)}
    return Rollout(steps=steps, last=last, final=final, version=3, column_versions=np.full(1, 3)), decision


def test_each_option_is_one_row_with_its_decision_step_and_its_summed_reward():
    cut, decision = record([0, 3, 5], [0, 1, 2, 0, 4, 0, 8, 16])
    out = OptionRecorder(1).rollout(cut, decision)
    s = out.steps
    # two options ended (at steps 2 and 4); they fill the last two rows, the rows before are dead
    np.testing.assert_array_equal(s[keys.ALIVE][:, 0], [False] * 6 + [True, True])
    np.testing.assert_array_equal(s[keys.OBS][6:, 0, 0], [0.0, 3.0])  # the decision steps' observations
    np.testing.assert_array_equal(s[keys.ACTIONS][6:, 0], [0, 3])
    np.testing.assert_array_equal(s[keys.VALUES][6:, 0], [0.0, 3.0])
    np.testing.assert_array_equal(s[keys.REWARDS][6:, 0], [0 + 1 + 2, 0 + 4])
    assert s[keys.TERMINATED][:6, 0].all() and not s[keys.TERMINATED][6:, 0].any()  # GAE stops at the dead rows
    assert out.last[keys.LAST_VALUES][0] == 5.0  # bootstraps from the option running now (decided at step 5)


def test_a_running_option_carries_into_the_next_rollout_with_its_reward_so_far():
    recorder = OptionRecorder(1)
    cut, decision = record([0, 3, 5], [0, 1, 2, 0, 4, 0, 8, 16])
    recorder.rollout(cut, decision)
    cut, decision = record([2], [32, 64, 0, 1])
    out = recorder.rollout(cut, decision).steps
    np.testing.assert_array_equal(out[keys.ALIVE][:, 0], [False, False, False, True])
    assert out[keys.OBS][3, 0, 0] == 5.0  # decided at step 5 of the rollout before
    assert out[keys.REWARDS][3, 0] == 0 + 8 + 16 + 32 + 64


def test_discounted_option_reward_discounts_each_step_inside_the_option():
    cut, decision = record([0, 3], [1, 1, 1, 1])
    out = OptionRecorder(1, gamma_in=0.5).rollout(cut, decision)
    assert out.steps[keys.REWARDS][3, 0] == pytest.approx(1 + 0.5 + 0.25)


def test_an_episode_end_ends_the_option_with_the_episode_and_its_final_value():
    cut, decision = record([0, 4], [0, 1, 1, 1, 0, 1], ends={2: "truncated"})
    out = OptionRecorder(1).rollout(cut, decision)
    s = out.steps
    np.testing.assert_array_equal(s[keys.ALIVE][:, 0], [False] * 5 + [True])
    assert s[keys.TRUNCATED][5, 0] and not s[keys.TERMINATED][5, 0] and s[keys.REWARDS][5, 0] == 2
    np.testing.assert_array_equal(out.final[keys.FINAL_T], [5])  # the final value moved to the option's row
    np.testing.assert_array_equal(out.final[keys.VALUES], [7.0])


ROOMS = {"id": "kilorl.envs.option_levels:option_levels",
         "kwargs": {"env": "kilorl.envs.rooms:SparseRooms", "env_kwargs": {"rooms": 2, "max_steps": 20}, "every_k": 3}}
LEVELS = {"policies": {"top": {}, "bottom": {}}, "policy_mapping": {"high": "top", "low": "bottom"},
          "hierarchy": {"high": "top", "low": "bottom"}}


def levels(**multi_agent):
    return tiny_config(env=ROOMS, multi_agent=LEVELS | multi_agent,
                       algo={"rollout_length": 40, "num_minibatches": 1, "update_epochs": 1},
                       parallelism={"actor": 1, "envs_per_actor": 3})


def test_the_runner_gives_the_high_level_one_row_per_option_and_the_low_level_every_step():
    cfg = levels()
    store = InMemoryParameterStore()
    learners = PolicyLearners(cfg, store)
    learners.publish(0)
    runner = HierarchicalEnvRunner(cfg, store, 0, seed=0)
    per_step = {}
    original = runner.recorder.rollout
    runner.recorder.rollout = lambda cut, decision: (per_step.update(cut=cut, decision=decision), original(cut, decision))[1]
    rollouts, info = runner.collect(0)
    low, high, cut = rollouts["bottom"].steps, rollouts["top"].steps, per_step["cut"].steps
    assert low[keys.ALIVE].sum() == 40 * 3  # the low agent acts on every step of every copy
    # every option starts with a decision; all but the ones still running have ended in the rollout
    running = sum(r is not None for r in runner.recorder.running)
    decisions = per_step["decision"] & cut[keys.ALIVE]  # the high agent's columns (the low's carry the flag too)
    assert high[keys.ALIVE].sum() == decisions.sum() - running > 0
    # the options' rewards are the high agent's per-step rewards, nothing lost or counted twice
    still = sum(r.reward for r in runner.recorder.running if r is not None)
    assert high[keys.REWARDS][high[keys.ALIVE]].sum() + still == pytest.approx(cut[keys.REWARDS][cut[keys.ALIVE]].sum())
    stats = learners.update(1, info["env_steps"], rollouts)
    assert np.isfinite(stats["policy_loss/top"]) and np.isfinite(stats["policy_loss/bottom"])


def test_levels_mapped_otherwise_than_the_hierarchy_says_are_an_error_naming_the_section():
    cfg = levels(policy_mapping={"high": "bottom", "low": "top"})
    store = InMemoryParameterStore()
    PolicyLearners(cfg, store).publish(0)
    with pytest.raises(ValueError, match=r"multi_agent.hierarchy: the agents map to \{'high': 'bottom'"):
        HierarchicalEnvRunner(cfg, store, 0, seed=0)
