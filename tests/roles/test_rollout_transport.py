"""Rollouts through the store (``store.transport: store``): same arrays out as in, no keys left behind."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.config import ConfigError
from kilorl.roles.rollout_transport import ROLLOUT_PREFIX, StoreRolloutReader, StoreRolloutWriter, pack, unpack
from kilorl.trainer import Trainer
from kilorl.trainer.metrics import read_metrics
from tests.conftest import fake_rollout, tiny_config


def _assert_same(got, sent) -> None:
    assert got.shape == sent.shape and got.version == sent.version
    assert set(got.steps) == set(sent.steps) and set(got.last) == set(sent.last)
    for k, v in sent.steps.items():
        assert got.steps[k].dtype == v.dtype and got.steps[k].shape == v.shape  # [T, N, ...] kept
        np.testing.assert_array_equal(got.steps[k], v)
    for k, v in sent.last.items():
        np.testing.assert_array_equal(got.last[k], v)
    assert set(got.moments) == set(sent.moments)
    for k, parts in sent.moments.items():
        assert len(got.moments[k]) == len(parts)
        for a, b in zip(got.moments[k], parts):
            np.testing.assert_array_equal(a.mean, b.mean)
            np.testing.assert_array_equal(a.var, b.var)
            assert a.count == b.count


def test_pack_then_unpack_gives_back_the_same_rollout():
    sent = fake_rollout(1, T=16, N=3, with_moments=True)
    sent.version = 7
    _assert_same(unpack(pack(sent)), sent)


@pytest.mark.parametrize("episodes_ended", [2, 0])
def test_the_full_step_record_survives_pack_and_unpack_bit_exactly(episodes_ended):
    """Final observations (none, too), the policy state at rollout start, per-column versions, the clock."""
    sent = fake_rollout(2, T=8, N=3)
    sent.final = {"t": np.array([1, 5])[:episodes_ended], "env": np.array([2, 0])[:episodes_ended],
                  "obs": np.arange(8, dtype=np.uint8).reshape(2, 4)[:episodes_ended],
                  "values": np.array([0.5, -1.25], np.float32)[:episodes_ended]}
    sent.state = {"h": np.random.default_rng(0).normal(size=(3, 2, 5)).astype(np.float32)}
    sent.version, sent.env_steps_before, sent.column_versions = 4, 1234, np.array([4, 5, 5])
    got = unpack(pack(sent))
    _assert_same(got, sent)
    for part in ("final", "state"):
        assert getattr(got, part).keys() == getattr(sent, part).keys()
        for k, v in getattr(sent, part).items():
            assert getattr(got, part)[k].dtype == v.dtype and getattr(got, part)[k].shape == v.shape, (part, k)
            np.testing.assert_array_equal(getattr(got, part)[k], v)
    assert got.env_steps_before == 1234 and got.column_versions.tolist() == [4, 5, 5]


def test_the_policy_state_and_full_step_record_survive_rays_transport_bit_exactly(ray_local):
    """The ``ray`` transport: a rollout returned by a Ray task (as an env runner's ``collect`` returns it)."""
    sent = fake_rollout(2, T=8, N=3)
    sent.final = {"t": np.array([1, 5]), "env": np.array([2, 0]), "obs": np.arange(8, dtype=np.uint8).reshape(2, 4),
                  "values": np.array([0.5, -1.25], np.float32)}
    sent.state = {"h": np.random.default_rng(0).normal(size=(3, 2, 5)).astype(np.float32),
                  "c": np.random.default_rng(1).normal(size=(3, 2, 5)).astype(np.float32)}
    sent.column_versions = np.array([4, 5, 5])
    got = ray_local.get(ray_local.remote(lambda r: r).remote(sent))
    _assert_same(got, sent)
    for part in ("final", "state"):
        assert getattr(got, part).keys() == getattr(sent, part).keys()
        for k, v in getattr(sent, part).items():
            assert getattr(got, part)[k].dtype == v.dtype and getattr(got, part)[k].shape == v.shape, (part, k)
            np.testing.assert_array_equal(getattr(got, part)[k], v)
    assert got.column_versions.tolist() == [4, 5, 5]


def test_a_rollout_written_by_an_actor_process_is_read_back_unchanged_and_deleted_after_release(
        ray_local, store_worker):
    address, token = store_worker.address, store_worker.token

    @ray_local.remote
    def produce():
        from kilorl.store import StoreClient

        rollout = fake_rollout(5, T=64, N=8, with_moments=True)
        rollout.version = 3
        with StoreClient(address, token=token) as c:
            return StoreRolloutWriter(c, actor=2).put(rollout)

    handle = ray_local.get(produce.remote())
    assert handle.key.startswith(ROLLOUT_PREFIX) and handle.version == 3
    expected = fake_rollout(5, T=64, N=8, with_moments=True)
    expected.version = 3
    with store_worker.client() as c:
        reader = StoreRolloutReader(c)
        _assert_same(reader.get(handle), expected)
        assert reader.take_stats()["rollout_handoff_s"] >= 0.0
        reader.release([handle])
        assert c.keys(ROLLOUT_PREFIX) == []


def test_an_unknown_transport_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"store\.transport: Input should be .ray. or .store."):
        tiny_config(store={"transport": "grpc"})


@pytest.mark.parametrize("learners", [1, 2])
def test_a_run_with_store_transport_trains_and_leaves_no_rollout_keys(ray_local, store_worker, tmp_path, learners):
    cfg = tiny_config(parallelism={"actor": 2, "learner": learners}, train={"total_env_steps": 2048, "pipeline_depth": 1},
                      store={"address": store_worker.address, "token": store_worker.token, "transport": "store"})
    result = Trainer(cfg, tmp_path / "run").fit()
    assert result.env_steps == 2048
    rows = [r for r in read_metrics(tmp_path / "run") if "iteration" in r]
    handoffs = [r["rollout_handoff_s"] for r in rows if "rollout_handoff_s" in r]
    assert rows and len(handoffs) == len(rows), "an update trained on rollouts that did not come through the store"
    assert all(np.isfinite(h) and h >= 0 for h in handoffs)
    with store_worker.client() as c:
        assert c.keys(ROLLOUT_PREFIX) == []
