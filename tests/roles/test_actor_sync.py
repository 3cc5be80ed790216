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


class _PublishesOnLook(InMemoryParameterStore):
    """Publishes ``tensors`` as version 1 when a runner looks for a newer version without
    waiting (a zero timeout) for the ``at``-th time: a learner's update landing mid-rollout."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.looks, self.tensors = at, 0, None

    def wait(self, name, min_version, timeout=None):
        if timeout == 0.0:
            self.looks += 1
            if self.looks == self.at:
                self.publish(name, 1, self.tensors)
        return super().wait(name, min_version, timeout)


def _queue_runner(refresh_every):
    cfg = tiny_config(algo={"name": "impala", "rollout_length": 16, "queue": {"refresh_every_steps": refresh_every}})
    store = _PublishesOnLook(at=2)
    LearnerRole(cfg, store).publish(0)
    rng = np.random.default_rng(0)
    store.tensors = {k: v + rng.normal(size=v.shape).astype(v.dtype) if k.startswith(keys.MODEL) else v
                     for k, v in _published(store, 0).items()}  # another policy: its log-probs differ
    return store, EnvRunner(cfg, store, 0, seed=0)


def test_a_queue_runner_takes_a_version_published_mid_rollout_at_its_next_look_and_keeps_each_steps_version():
    import torch

    store, runner = _queue_runner(refresh_every=4)
    rollout, info = runner.collect(0)
    assert store.looks == 3  # at steps 4, 8 and 12; version 1 appeared at the second look
    assert info["step_versions"] == [0] * 8 + [1] * 8 and info["version"] == 0
    assert rollout.version == 0 and rollout.column_versions.tolist() == [0] * 4  # as old as its first step
    obs, actions = torch.from_numpy(rollout.steps[keys.OBS]), torch.from_numpy(rollout.steps[keys.ACTIONS])
    with torch.no_grad():
        logp_now = runner.model.evaluate_actions(obs.flatten(0, 1), actions.flatten())[0].view(16, 4).numpy()
    recorded = rollout.steps[keys.LOGP]
    np.testing.assert_allclose(recorded[8:], logp_now[8:], rtol=1e-5, atol=1e-6)  # acted with version 1 from step 8
    assert not np.allclose(recorded[:8], logp_now[:8], atol=1e-3)  # and with version 0 before it


def test_without_refresh_a_runner_acts_a_whole_rollout_with_one_version_and_never_looks():
    store, runner = _queue_runner(refresh_every=None)
    _, info = runner.collect(0)
    assert store.looks == 0 and "step_versions" not in info and runner.version == 0
