"""Normalizer statistics merged from many actors equal the statistics of all the data."""

import numpy as np

from kilorl.envs.normalization import Moments, RunningMeanStd, normalize


def test_merging_batches_equals_whole_data_moments():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=i, scale=1 + i, size=(50 + 10 * i, 3)) for i in range(4)]
    rms = RunningMeanStd((3,), epsilon=0.0)
    rms.count = 0.0
    for p in parts:
        rms.update(Moments.of(p, (3,)))
    whole = np.concatenate(parts)
    np.testing.assert_allclose(rms.mean, whole.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, whole.var(0), rtol=1e-10)
    assert rms.count == len(whole)


def test_state_round_trip_is_exact():
    rms = RunningMeanStd((2,))
    rms.update(Moments.of(np.random.default_rng(1).normal(size=(7, 2)), (2,)))
    other = RunningMeanStd((2,))
    other.load(rms.state())
    assert (other.mean == rms.mean).all() and (other.var == rms.var).all() and other.count == rms.count


def test_normalize_clips():
    x = np.array([[100.0, -100.0, 0.0]])
    out = normalize(x, np.zeros(3), np.ones(3), clip=5.0)
    np.testing.assert_array_equal(out, [[5.0, -5.0, 0.0]])
