"""Rollouts keep their [T, N, ...] layout from the actor, through merging, into the algorithm."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.algos import keys
from kilorl.core import Rollout
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole, merge_rollouts
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config


class ShapeSpy:
    """Wraps a real algorithm learner and records the rollout shapes its ``update`` receives."""

    def __init__(self, inner) -> None:
        self.inner, self.seen = inner, []

    def update(self, source, env_steps_total: int) -> dict[str, float]:
        rollout = source.rollout()
        self.seen.append({k: v.shape for k, v in rollout.steps.items()} | {"last": rollout.last[keys.LAST_VALUES].shape})
        return self.inner.update(source, env_steps_total)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_two_actors_rollouts_reach_the_algorithm_as_T_by_total_N(algo):
    T, N = 16, 3
    cfg = tiny_config(algo={"name": algo, "rollout_length": T} | ({"num_minibatches": 2} if algo == "ppo" else {}),
                      parallelism={"actor": 2, "envs_per_actor": N})
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    actors = [EnvRunner(cfg, store, i, seed=i) for i in range(2)]
    rollouts = [a.collect(0)[0] for a in actors]
    for r in rollouts:
        assert r.shape == (T, N)
        assert r.steps[keys.OBS].shape == (T, N, 4) and r.last[keys.LAST_VALUES].shape == (N,)
    expected_fields = {"ppo": {keys.LOGP, keys.VALUES}, "a2c": {keys.VALUES}}[algo]
    assert set(rollouts[0].steps) == {keys.OBS, keys.ACTIONS, keys.REWARDS, keys.TERMINATED, keys.TRUNCATED} | expected_fields

    spy = ShapeSpy(learner.algorithm)
    learner.feed.algorithm = spy
    stats = learner.update(1, 2 * T * N, *rollouts)
    assert spy.seen == [{k: (T, 2 * N, *rollouts[0].steps[k].shape[2:]) for k in rollouts[0].steps} | {"last": (2 * N,)}]
    assert np.isfinite(stats["policy_loss"]) and store.latest_version(keys.POLICY) == 1


def test_merge_concatenates_along_the_env_axis_in_actor_order():
    a = Rollout({"rewards": np.zeros((4, 2))}, {"values": np.zeros(2)},
                final={"t": np.array([1]), "env": np.array([1]), "obs": np.full((1, 3), 7.0)},
                state={"h": np.zeros((2, 5))}, version=3, column_versions=np.array([3, 3]))
    b = Rollout({"rewards": np.ones((4, 3))}, {"values": np.ones(3)},
                final={"t": np.array([0, 3]), "env": np.array([0, 2]), "obs": np.full((2, 3), 8.0)},
                state={"h": np.ones((3, 5))}, version=4, column_versions=np.array([4, 4, 4]))
    merged = merge_rollouts([a, b])
    assert merged.version == 3 and merged.column_versions.tolist() == [3, 3, 4, 4, 4]  # each column keeps its own
    assert merged.shape == (4, 5)
    np.testing.assert_array_equal(merged.steps["rewards"][:, 2:], 1.0)
    np.testing.assert_array_equal(merged.last["values"], [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(merged.final["env"], [1, 2, 4])  # b's envs come after a's two
    np.testing.assert_array_equal(merged.final["t"], [1, 0, 3])
    np.testing.assert_array_equal(merged.final["obs"][:, 0], [7.0, 8.0, 8.0])
    assert merged.state["h"].shape == (5, 5)
