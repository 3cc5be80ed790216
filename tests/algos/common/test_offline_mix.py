"""Recorded rows mixed into every batch: the share is exact in each batch, the recorded rows
survive the online table wrapping, and a batch can be all recorded data."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.algos.common.offline_mix import MixedSource, OfflineTable, offline_positions, sample_batches
from kilorl.algos.common.transitions import TransitionTable
from kilorl.algos.sac.config import SACConfig
from tests.algos.test_sac import _learner, _rollout, one_torch_thread  # noqa: F401 (an autouse fixture)


def _offline(n: int = 50) -> OfflineTable:
    """Rows whose ``reward`` is -1 (online rows of ``_rollout`` are drawn from N(0, 1), never exactly -1)."""
    rows = {"obs": np.full((n, 3), 9.0, np.float32), "action": np.zeros((n, 2), np.float32),
            "reward": np.full(n, -1.0, np.float32), "next_obs": np.zeros((n, 3), np.float32),
            "discount": np.ones(n, np.float32)}
    return OfflineTable(rows, seed=3)


def _online(capacity: int) -> TransitionTable:
    return TransitionTable(capacity, (3,), np.float32, 0.99, 1, seed=1, action_shape=(2,), action_dtype=np.float32)


def test_every_one_of_1000_batches_holds_exactly_its_share_of_recorded_rows():
    source = MixedSource(_online(1000), _offline(), ratio=0.3)
    source.add(_rollout(0))
    for b in range(1000):
        batch = source.sample(37)
        recorded = batch["reward"] == -1.0
        assert recorded.sum() == round(0.3 * 37) == 11, b
        np.testing.assert_array_equal(recorded, batch["offline"])
        np.testing.assert_array_equal(batch["obs"][recorded], 9.0)  # the rows are the recorded ones
    # drawn many batches at once, each batch keeps its share
    many = sample_batches(source, 37, 20)["offline"].reshape(20, 37)
    assert (many.sum(1) == 11).all()


def test_recorded_rows_sit_evenly_among_the_online_ones():
    np.testing.assert_array_equal(offline_positions(8, 0.5), [1, 3, 5, 7])
    assert len(offline_positions(10, 0.0)) == 0 and len(offline_positions(10, 1.0)) == 10


def test_recorded_rows_survive_the_online_table_overflowing():
    online = _online(capacity=40)
    source = MixedSource(online, _offline(50), ratio=0.5)
    for i in range(10):  # 10 x 32 rows into a table of 40: it wraps eight times
        source.add(_rollout(i))
    assert len(online) == 40 and len(source) == 90
    batch = source.sample(1000)
    assert batch["offline"].sum() == 500 and (batch["reward"][batch["offline"]] == -1.0).all()


def test_a_batch_of_recorded_rows_only_needs_no_online_row_and_a_mixed_one_waits_for_them():
    assert len(MixedSource(_online(10), _offline(), ratio=1.0)) == 50
    assert len(MixedSource(_online(10), _offline(), ratio=0.5)) == 0
    assert MixedSource(_online(10), _offline(), ratio=1.0).sample(16)["offline"].all()
    with pytest.raises(ValueError, match="ratio"):
        MixedSource(_online(10), _offline(), ratio=1.5)


def test_sac_trains_on_a_mixed_table_and_reports_each_sources_q():
    from kilorl.algos.api import OfflineRows

    n = 64
    rng = np.random.default_rng(0)
    rows = {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32), "action": rng.uniform(-2, 2, (n, 2)),
            "reward": rng.normal(size=n), "next_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "terminated": rng.random(n) < 0.1}
    learner = _learner(SACConfig(learning_starts=0, batch_size=8))
    object.__setattr__(learner.ctx, "offline", OfflineRows(rows, 0.5, "test"))
    source = learner.make_replay_table()
    assert isinstance(source, MixedSource)
    assert np.abs(source.offline.sample(64)["action"]).max() <= 1.0  # env units mapped into [-1, 1]
    source.add(_rollout(0))
    stats = learner.update(source, 32)
    assert stats["gradient_steps"] == 32 and {"offline_q_mean", "online_q_mean"} <= set(stats)


def test_a_column_only_the_recorded_rows_have_is_nan_in_the_online_rows():
    rows = {"obs": np.full((8, 3), 9.0, np.float32), "action": np.zeros((8, 2), np.float32),
            "reward": np.full(8, -1.0, np.float32), "next_obs": np.zeros((8, 3), np.float32),
            "discount": np.ones(8, np.float32), "return_to_go": np.full(8, 7.0, np.float32)}
    source = MixedSource(_online(100), OfflineTable(rows, seed=0), ratio=0.25)
    source.add(_rollout(0))
    batch = source.sample(16)
    assert batch["offline"].sum() == 4 and (batch["return_to_go"][batch["offline"]] == 7.0).all()
    assert np.isnan(batch["return_to_go"][~batch["offline"]]).all()
