"""Leak detection on one memory series: a robust trend, a significance test, a forecast.

Why this shape: a leak is a *sustained* upward trend. Allocators produce patterns that
fool a least-squares slope: a garbage-collection sawtooth, a one-off step when a cache
fills, noise. So the detector

* ignores a warm-up window (start-up allocations),
* fits the Theil-Sen slope (median of pairwise slopes; robust to outliers and steps)
  over a sliding window and requires it to exceed a minimum slope,
* requires the Mann-Kendall trend test to be significant (rank-based, so the noise
  distribution does not matter),
* requires each half of the window to grow on its own (a single step lies in one half
  and leaves the other flat; a leak raises both), and no single sample-to-sample jump
  to account for more than half of the window's rise (a step is one jump, a leak many),
* and reports only after several consecutive evaluations agree.

A leak steep enough to reach its limit before that test can conclude (``fast_max_ttl_s``)
is reported from a short window of the most recent samples instead (``fast_window_s``, warm-up
included): the same tests (Theil-Sen slope, Mann-Kendall, both halves rising, no dominant
jump, here a stricter one that counts drops too: a robust fit would shrug off the one
large drop of a sawtooth) on fewer samples, ``fast_confirmations`` verdicts, and only while
the limit is that close. A start-up
allocation is a few large jumps and rejected by the jump test; a healthy process far from
its limit never gets that forecast. What it costs in false alarms is measured in
docs/benchmarks.md ("Steep leaks against a limit").

The forecast extrapolates the Theil-Sen line of the window's recent half to the limit (the role's budget, the
device's free memory, the node's RAM): ``time_to_limit_s``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from kilorl.monitor.settings import LeakDetectorConfig


@dataclass(frozen=True)
class LeakVerdict:
    suspected: bool
    slope_bytes_per_s: float
    """Theil-Sen slope over the window (NaN until there are enough samples)."""
    z: float
    """Mann-Kendall z-score of the upward trend (NaN until ready)."""
    level_bytes: float
    time_to_limit_s: float
    """+Inf unless a leak is suspected and a limit is known."""
    limit_bytes: float | None
    fast: bool = False
    """Reported by the steep-leak test on the short window (not the full window's)."""


def theil_sen(t: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """(slope, intercept): the median pairwise slope and the median residual intercept."""
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    slope = float(np.median((v[j] - v[i])[ok] / dt[ok]))
    return slope, float(np.median(v - slope * t))


def mann_kendall_z(v: np.ndarray) -> float:
    """Mann-Kendall z of an upward trend (ties ignored in the variance: conservative)."""
    n = len(v)
    i, j = np.triu_indices(n, k=1)
    s = float(np.sign(v[j] - v[i]).sum())
    var = n * (n - 1) * (2 * n + 5) / 18.0
    if s > 0:
        return (s - 1) / math.sqrt(var)
    if s < 0:
        return (s + 1) / math.sqrt(var)
    return 0.0


class LeakDetector:
    """Feed ``update(t, bytes, limit)`` once per sample; read the verdict it returns."""

    def __init__(self, config: LeakDetectorConfig | None = None) -> None:
        self.config = config or LeakDetectorConfig()
        self._t0: float | None = None
        self._samples: deque[tuple[float, float]] = deque()
        self._recent: deque[tuple[float, float]] = deque()
        """The short window of the steep-leak test (warm-up included)."""
        self._streak = 0
        self._steep_streak = 0
        self.last = LeakVerdict(False, math.nan, math.nan, math.nan, math.inf, None)

    def reset(self) -> None:
        """Forget the history (after the role was restarted or its memory was released)."""
        self._t0, self._streak, self._steep_streak = None, 0, 0
        self._samples.clear()
        self._recent.clear()

    def update(self, t: float, value: float, limit: float | None = None) -> LeakVerdict:
        cfg = self.config
        if self._t0 is None:
            self._t0 = t
        self._recent.append((t, float(value)))
        while self._recent[0][0] < t - cfg.fast_window_s:
            self._recent.popleft()
        if t - self._t0 < cfg.warmup_s:
            self.last = self._steep(limit) or LeakVerdict(False, math.nan, math.nan, value, math.inf, limit)
            return self.last
        self._samples.append((t, float(value)))
        while self._samples and self._samples[0][0] < t - cfg.window_s:
            self._samples.popleft()
        if len(self._samples) > cfg.max_samples:  # thin the older half: keep every other sample
            keep = list(self._samples)
            half = len(keep) // 2
            self._samples = deque(keep[:half:2] + keep[half:])
        verdict = self._evaluate(t, value, limit)
        self.last = verdict if verdict.suspected else self._steep(limit) or verdict
        return self.last

    def _steep(self, limit: float | None) -> LeakVerdict | None:
        """The steep-leak verdict once ``fast_confirmations`` evaluations in a row agree, else None."""
        verdict = self._steep_once(limit)
        self._steep_streak = self._steep_streak + 1 if verdict is not None else 0
        return verdict if self._steep_streak >= self.config.fast_confirmations else None

    def _steep_once(self, limit: float | None) -> LeakVerdict | None:
        """This evaluation's steep-leak verdict on the short window, or None (not steep, or the limit is not that close)."""
        cfg = self.config
        if limit is None or cfg.fast_max_ttl_s <= 0 or len(self._recent) < cfg.fast_min_samples:
            return None
        arr = np.asarray(self._recent, dtype=np.float64)
        t, v = arr[:, 0] - arr[0, 0], arr[:, 1]
        if t[-1] < 0.75 * cfg.fast_window_s:
            return None
        slope, intercept = theil_sen(t, v)
        if slope < cfg.fast_min_slope_bytes_per_s:
            return None
        level = slope * t[-1] + intercept
        ttl = max(0.0, (limit - level) / slope)
        if ttl > cfg.fast_max_ttl_s:
            return None
        z = mann_kendall_z(v)
        mid = t[-1] / 2.0
        halves = [theil_sen(t[m], v[m])[0] if m.sum() >= 3 else -math.inf for m in (t <= mid, t > mid)]
        steps = np.diff(v)
        jump = float(np.max(np.abs(steps), initial=0.0))  # a large drop is memory released: a sawtooth, not a leak
        if z < cfg.fast_min_z or min(halves) < 0.5 * slope or jump > cfg.fast_max_jump_fraction * slope * t[-1]:
            return None
        return LeakVerdict(True, slope, z, level, ttl, limit, fast=True)

    def _evaluate(self, now: float, value: float, limit: float | None) -> LeakVerdict:
        cfg = self.config
        arr = np.asarray(self._samples, dtype=np.float64)
        if len(arr) < cfg.min_samples or arr[-1, 0] - arr[0, 0] < 0.5 * cfg.window_s:
            self._streak = 0
            return LeakVerdict(False, math.nan, math.nan, value, math.inf, limit)
        t = arr[:, 0] - arr[0, 0]
        v = arr[:, 1]
        slope, intercept = theil_sen(t, v)
        z = mann_kendall_z(v)
        mid = t[-1] / 2.0
        halves = [(t[m], v[m]) for m in (t <= mid, t > mid)]
        fits = [theil_sen(ht, hv) if len(ht) >= 4 else (-math.inf, 0.0) for ht, hv in halves]
        halves_grow = all(f[0] >= 0.5 * cfg.min_slope_bytes_per_s for f in fits)
        rise = slope * t[-1]
        spread = float(np.max(np.diff(v), initial=0.0)) <= cfg.max_jump_fraction * rise
        trending = slope >= cfg.min_slope_bytes_per_s and z >= cfg.min_z and halves_grow and spread
        self._streak = self._streak + 1 if trending else 0
        suspected = self._streak >= cfg.confirmations
        # Forecast from the recent half: right after a leak starts, the full window still
        # holds flat samples and would under-estimate how fast the limit approaches.
        recent_slope, recent_intercept = fits[1] if math.isfinite(fits[1][0]) else (slope, intercept)
        level = recent_slope * t[-1] + recent_intercept
        ttl = math.inf
        if suspected and limit is not None and recent_slope > 0:
            ttl = max(0.0, (limit - level) / recent_slope)
        return LeakVerdict(suspected, slope, z, level, ttl, limit)
