"""Sync modes: batches carry their version, the learner refuses stale ones, hybrid groups refresh apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.config import ConfigError
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from kilorl.roles.sync_groups import SyncGroups
from tests.conftest import fake_rollout, tiny_config


def with_version(rollout, version):
    rollout.version = version
    return rollout


@pytest.mark.parametrize(("sections", "field"), [
    ({"sync": {"mode": "sync"}, "train": {"pipeline_depth": 1}}, "train.pipeline_depth"),
    ({"sync": {"mode": "async", "max_staleness": 0}, "train": {"pipeline_depth": 2}}, "sync.max_staleness"),
    ({"sync": {"mode": "hybrid"}}, "sync.groups"),
    ({"sync": {"mode": "async", "groups": {"model/value_": "async"}}}, "sync.groups"),
    ({"sync": {"mode": "eventually"}}, "mode"),
])
def test_inconsistent_sync_settings_are_refused_naming_the_field(sections, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        tiny_config(**sections)


def test_the_learner_drops_a_batch_older_than_max_staleness_and_keeps_its_weights():
    cfg = tiny_config(sync={"mode": "async", "max_staleness": 2}, train={"pipeline_depth": 2})
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    before = learner.weights_digest()
    stats = learner.update(5, 128, with_version(fake_rollout(0), 1))  # trains version 4: 3 behind
    assert stats["stale_rollouts"] == 1 and stats["skipped_update"] == 1
    assert learner.weights_digest() == before and store.latest_version(keys.POLICY) == 5
    stats = learner.update(6, 256, with_version(fake_rollout(1), 3))  # trains version 5: 2 behind, allowed
    assert stats["stale_rollouts"] == 0 and stats["skipped_update"] == 0 and learner.weights_digest() != before


def test_only_the_stale_part_of_a_batch_is_dropped():
    cfg = tiny_config(parallelism={"actor": 2}, sync={"mode": "sync"})
    learner = LearnerRole(cfg, InMemoryParameterStore())
    stats = learner.update(3, 256, with_version(fake_rollout(0), 2), with_version(fake_rollout(1), 1))
    assert stats["stale_rollouts"] == 1 and stats["skipped_update"] == 0 and np.isfinite(stats["policy_loss"])


def test_sync_mode_collects_every_rollout_with_exactly_the_version_being_trained(ray_local, tmp_path):
    from kilorl.trainer import Cluster
    from kilorl.trainer.loop import OnPolicyLoop
    from kilorl.trainer.session import RoleSession

    cfg = tiny_config(parallelism={"actor": 2}, sync={"mode": "sync"}, train={"total_env_steps": 1280})
    with RoleSession(cfg, Cluster()) as roles:
        results = list(OnPolicyLoop(cfg, roles, 0, 0))
    assert len(results) == 5
    for it in results:  # update `it.iteration` trained version it.iteration - 1 on rollouts of that version
        assert [i["version"] for i in it.infos] == [it.iteration - 1] * 2
        assert it.stats["stale_rollouts"] == 0


def test_hybrid_refreshes_async_groups_only_when_older_than_max_staleness():
    names = ["model/policy_head.weight", "model/value_head.weight", "obs_rms/mean"]
    g = SyncGroups(names, "hybrid", {"model/value_": "async"}, max_staleness=2)
    assert g.wanted(0) == names
    g.took(0, names)
    assert g.wanted(1) == g.wanted(2) == ["model/policy_head.weight", "obs_rms/mean"]
    g.took(2, g.wanted(2))
    assert g.wanted(3) == names and g.held == {"sync": 2, "async": 0}


def test_a_hybrid_actor_acts_with_a_value_head_at_most_max_staleness_old():
    cfg = tiny_config(sync={"mode": "hybrid", "groups": {"model/value_": "async"}, "max_staleness": 1})
    store = InMemoryParameterStore(keep=8)
    learner = LearnerRole(cfg, store)
    actor = EnvRunner(cfg, store, 0, seed=0)
    for v in range(4):
        w = {k: np.full_like(a, float(v)) if k.startswith(keys.MODEL) else a for k, a in learner.algorithm.weights().items()}
        store.publish(keys.POLICY, v, w)
        actor.collect(v)
        value_v = float(actor.model.state_dict()["value_head.weight"].flatten()[0])
        policy_v = float(actor.model.state_dict()["policy_head.weight"].flatten()[0])
        assert policy_v == v  # sync group: always the newest
        assert v - value_v <= 1 and value_v == {0: 0, 1: 0, 2: 2, 3: 2}[v]
    assert torch.is_tensor(actor.model.state_dict()["value_head.weight"])
