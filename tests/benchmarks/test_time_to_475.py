"""The time-to-475 benchmark's bookkeeping: every side summarised, a run that never reached
counted as infinitely slow (a failure can only make a side look worse)."""

from __future__ import annotations

import math

from tests.benchmarks.bench_modules import load_bench

t475 = load_bench("time_to_475")
pvp = load_bench("ppo_vs_peers")


def _run(side, seed, time_s=None):
    reached = time_s is not None
    return pvp.RunResult(side, "cartpole", seed, reached, "threshold" if reached else "budget", time_s=time_s,
                         time_incl_startup_s=None if time_s is None else time_s + 10, env_steps=None if time_s is None else 1000)


def test_each_side_has_its_reached_count_and_a_median_where_a_miss_counts_as_infinitely_slow():
    runs = [_run("IMPALA", 1, 30.0), _run("IMPALA", 2, None), _run("IMPALA", 3, 10.0),
            _run("SB3", 1, 50.0), _run("SB3", 2, None), _run("SB3", 3, None)]  # SB3's runner names itself "SB3"
    out = t475.summarize(runs)
    assert set(out) == {"IMPALA", "SB3 PPO"}
    assert out["IMPALA"]["reached"] == 2 and out["IMPALA"]["median_time_s"] == 30.0
    assert out["SB3 PPO"]["reached"] == 1 and math.isinf(out["SB3 PPO"]["median_time_s"])
