"""An actor takes each version into the model it keeps: copied into the same tensors."""

from __future__ import annotations

import numpy as np

from kilorl.algos import keys
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config


def _cfg():
    return tiny_config(env={"normalize_obs": True, "normalize_reward": True})


def _actor_at_version_0():
    """A learner that published version 0, and an actor (normalizers on) that took nothing yet."""
    cfg = _cfg()
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    return store, learner, EnvRunner(cfg, store, 0, seed=0)


def _published(store, version):
    _, got = store.fetch(keys.POLICY, version)
    return {k: np.asarray(v) for k, v in got.items()}


def test_each_version_is_copied_into_the_models_own_tensors_and_the_normalizer_statistics():
    store, learner, actor = _actor_at_version_0()
    params = dict(actor.model.state_dict(keep_vars=True))
    ptrs = {k: t.data_ptr() for k, t in params.items()}
    stats = (actor.copy.obs_mean, actor.copy.obs_var, actor.copy.ret_var)
    rollout, _ = actor.collect(0)
    learner.update(1, rollout.shape[0] * rollout.shape[1], rollout)  # publishes version 1
    actor.collect(1)
    assert actor.version == 1
    published = _published(store, 1)
    now = dict(actor.model.state_dict(keep_vars=True))
    for k, t in now.items():
        assert t is params[k] and t.data_ptr() == ptrs[k]  # the same tensors, never load_state_dict
        np.testing.assert_array_equal(t.detach().numpy(), published[keys.MODEL + k])
    assert all(a is b for a, b in zip((actor.copy.obs_mean, actor.copy.obs_var, actor.copy.ret_var), stats))  # filled in place
    np.testing.assert_array_equal(actor.copy.obs_mean, published[keys.OBS_RMS + "mean"])
    np.testing.assert_array_equal(actor.copy.obs_var, published[keys.OBS_RMS + "var"])
    assert float(actor.copy.ret_var) == float(published[keys.RET_RMS + "var"])
    assert not np.array_equal(published[keys.OBS_RMS + "mean"], 0.0)  # the statistics did move


def test_a_version_the_model_cannot_hold_in_place_is_loaded_as_new_tensors_from_then_on():
    store, _, actor = _actor_at_version_0()
    actor.collect(0)
    wide = {k: v.astype(np.float64) if k.startswith(keys.MODEL) else v for k, v in _published(store, 0).items()}
    store.publish(keys.POLICY, 1, wide)  # float64 weights: not what the model's float32 tensors hold
    actor.copy.sync(1)  # (a float64 model cannot act on float32 observations: only the load is checked)
    assert actor.version == 1 and actor.copy._into is None
    for k, t in actor.model.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), wide[keys.MODEL + k])
