"""The leak detector flags sustained growth quickly and ignores GC sawtooth, steps and noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kilorl.monitor.leak import LeakDetector, mann_kendall_z, theil_sen
from kilorl.monitor.settings import LeakDetectorConfig

MiB = 2**20
N = 600  # ten minutes at one sample per second
LEAK_START = 100


def first_flag(values, limit=None, config: LeakDetectorConfig | None = None) -> float | None:
    det = LeakDetector(config)
    for t, v in enumerate(values):
        if det.update(float(t), float(v), limit).suspected:
            return float(t)
    return None


def flat(rng, sigma_mib=3.0):
    return 500 * MiB + rng.normal(0, sigma_mib * MiB, N)


def test_theil_sen_recovers_a_line_through_outliers():
    t = np.arange(50, dtype=float)
    v = 3.0 * t + 10.0
    v[::5] += 1e6  # 20% wild outliers
    slope, intercept = theil_sen(t, v)
    assert slope == pytest.approx(3.0, rel=1e-6) and intercept == pytest.approx(10.0, abs=1e-3)


def test_mann_kendall_is_strongly_positive_for_a_trend_and_small_for_noise():
    rng = np.random.default_rng(0)
    assert mann_kendall_z(np.arange(40.0) + rng.normal(0, 3, 40)) > 5
    assert abs(mann_kendall_z(rng.normal(0, 1, 40))) < 3
    assert mann_kendall_z(-np.arange(40.0)) < -5


@pytest.mark.parametrize("rate_mib_s", [1, 2, 5])
@pytest.mark.parametrize("seed", range(5))
def test_a_leak_of_a_few_mib_per_second_is_flagged_within_60_samples(rate_mib_s, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(N)
    v = flat(rng) + np.where(t > LEAK_START, (t - LEAK_START) * rate_mib_s * MiB, 0)
    flagged = first_flag(v)
    assert flagged is not None and LEAK_START < flagged <= LEAK_START + 60


@pytest.mark.parametrize("seed", range(5))
def test_a_gc_sawtooth_is_not_a_leak(seed):
    rng = np.random.default_rng(seed)
    t = np.arange(N)
    v = 500 * MiB + (t % 7) * 8 * MiB + rng.normal(0, 2 * MiB, N)  # +8 MiB/s for 7 s, then collected
    assert first_flag(v) is None


@pytest.mark.parametrize("seed", range(5))
def test_step_allocations_are_not_a_leak(seed):
    rng = np.random.default_rng(seed)
    t = np.arange(N)
    v = flat(rng, 2.0) + np.where(t > 150, 200 * MiB, 0) + np.where(t > 400, 100 * MiB, 0)
    assert first_flag(v) is None


@pytest.mark.parametrize("seed", range(5))
def test_heavy_tailed_noise_is_not_a_leak(seed):
    rng = np.random.default_rng(seed)
    assert first_flag(500 * MiB + rng.standard_t(2, N) * 5 * MiB) is None


def test_slow_growth_below_the_minimum_slope_is_not_flagged():
    t = np.arange(N, dtype=float)
    assert first_flag(500 * MiB + t * 0.2 * MiB) is None  # significant, but 0.2 MiB/s < 0.5 MiB/s


def test_start_up_allocations_inside_the_warm_up_are_ignored():
    rng = np.random.default_rng(1)
    t = np.arange(N)
    v = flat(rng) + np.minimum(t, 15) * 50 * MiB  # 750 MiB in the first 15 s, then steady
    assert first_flag(v) is None
    cold = LeakDetectorConfig(warmup_s=0)
    assert first_flag(np.arange(60) * 50.0 * MiB, config=cold) is not None  # the same ramp without warm-up is flagged


def test_time_to_limit_extrapolates_the_trend_to_the_limit():
    rng = np.random.default_rng(2)
    t = np.arange(200)
    v = 500 * MiB + rng.normal(0, 1 * MiB, 200) + np.where(t > 50, (t - 50) * 2 * MiB, 0)
    limit = 1500 * MiB
    det = LeakDetector()
    verdict = None
    for i, x in enumerate(v):
        verdict = det.update(float(i), float(x), limit)
        if verdict.suspected:
            break
    assert verdict is not None and verdict.suspected
    expected = (limit - (500 * MiB + (i - 50) * 2 * MiB)) / (2 * MiB)
    assert verdict.time_to_limit_s == pytest.approx(expected, rel=0.1)
    for j in range(i + 1, i + 60):  # once the window holds only the leak, its slope is the leak rate
        verdict = det.update(float(j), float(v[j]), limit)
    assert verdict.suspected and verdict.slope_bytes_per_s == pytest.approx(2 * MiB, rel=0.05)


def test_no_verdict_before_the_window_has_enough_samples_and_no_forecast_without_a_leak():
    det = LeakDetector()
    v = det.update(0.0, 1.0, 10.0)
    assert not v.suspected and math.isnan(v.slope_bytes_per_s) and math.isinf(v.time_to_limit_s)
    for i in range(1, 100):
        v = det.update(float(i), 100 * MiB, 200 * MiB)
    assert not v.suspected and v.slope_bytes_per_s == 0.0 and math.isinf(v.time_to_limit_s)


def test_the_window_is_thinned_beyond_max_samples():
    cfg = LeakDetectorConfig(max_samples=50, window_s=1000, warmup_s=0)
    det = LeakDetector(cfg)
    for i in range(500):
        det.update(i * 0.1, float(i))
    assert len(det._samples) <= 50


GiB = 2**30


@pytest.mark.parametrize("rate_mib_s", [20, 50, 100])
@pytest.mark.parametrize("seed", range(3))
def test_a_steep_leak_is_flagged_before_its_limit_from_the_short_window_when_the_full_one_is_too_late(rate_mib_s, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(0, 60, 0.5)  # two samples a second, the leak from the start (inside the warm-up)
    v = 400 * MiB + rng.normal(0, 2 * MiB, len(t)) + t * rate_mib_s * MiB
    det = LeakDetector()
    for i, x in enumerate(v):
        verdict = det.update(float(t[i]), float(x), 2 * GiB)
        if verdict.suspected:
            break
    assert verdict.suspected and v[i] < 2 * GiB
    assert verdict.fast == (rate_mib_s >= 50)  # 20 MiB/s leaves the full test time to conclude (~42 s left)
    # as early as the short window allows, or once the limit is within fast_max_ttl_s
    within_horizon = (2 * GiB - 400 * MiB - det.config.fast_max_ttl_s * rate_mib_s * MiB) / (rate_mib_s * MiB)
    assert t[i] <= max(det.config.fast_window_s, within_horizon) + 2.0  # + confirmations, noise
    assert verdict.slope_bytes_per_s == pytest.approx(rate_mib_s * MiB, rel=0.1)
    assert verdict.time_to_limit_s == pytest.approx((2 * GiB - v[i]) / (rate_mib_s * MiB), rel=0.2, abs=1.0)


def test_a_steep_leak_far_from_its_limit_waits_for_the_full_test():
    t = np.arange(0, 60, 0.5)
    v = 400 * MiB + t * 20 * MiB
    det = LeakDetector()
    verdicts = [det.update(float(a), float(b), 64 * GiB) for a, b in zip(t, v, strict=True)]
    assert not any(x.fast for x in verdicts)  # 64 GiB is minutes away: no short-window verdict
    first = next(i for i, x in enumerate(verdicts) if x.suspected)
    assert t[first] >= det.config.warmup_s


@pytest.mark.parametrize("seed", range(5))
def test_start_up_jumps_gc_sawtooth_and_steps_near_a_limit_are_not_steep_leaks(seed):
    rng = np.random.default_rng(seed)
    t = np.arange(0, 120, 0.5)
    imports = np.minimum(np.floor(t / 1.0), 3) * 250 * MiB  # 750 MiB in three jumps, then flat
    saw = (t % 7) * 8 * MiB
    for v in (400 * MiB + imports, 600 * MiB + saw, 400 * MiB + np.where(t > 40, 300 * MiB, 0)):
        v = v + rng.normal(0, 2 * MiB, len(t))
        limit = 1.2 * GiB  # within fast_max_ttl_s of the jumps' rate
        assert first_flag_at(t, v, limit) is None


def test_a_sustained_start_up_ramp_close_to_the_limit_is_taken_for_a_leak_only_within_fast_max_ttl_s():
    t = np.arange(0, 120, 0.5)
    v = 500 * MiB + np.minimum(t, 15) * 50 * MiB  # 750 MiB in 15 s, then steady: indistinguishable from a leak
    assert first_flag_at(t, v, 8 * GiB) is None  # the limit is minutes away at 50 MiB/s
    assert first_flag_at(t, v, 2 * GiB) is not None  # the trade: within fast_max_ttl_s it is acted on
    assert first_flag_at(t, v, 2 * GiB, LeakDetectorConfig(fast_max_ttl_s=0)) is None


def first_flag_at(t, values, limit, config: LeakDetectorConfig | None = None) -> float | None:
    det = LeakDetector(config)
    for a, b in zip(t, values, strict=True):
        if det.update(float(a), float(b), limit).suspected:
            return float(a)
    return None
