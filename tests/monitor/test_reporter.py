"""RoleMetrics: per-period gauges, device series that come and go with the device, leak verdicts exported."""

from __future__ import annotations

import math

from kilorl.monitor import RoleMetrics
from kilorl.monitor.resources import DeviceReading, ResourceReading
from tests.monitor.helpers import series

GiB = 2**30


def text(m: RoleMetrics) -> dict:
    from prometheus_client import generate_latest

    return series(generate_latest(m.registry).decode())


def test_steps_per_second_and_episode_return_cover_the_last_period_only():
    m = RoleMetrics("actor", 0, "n0", sample_resources=False)
    m.sample(now=m._t_last + 0.0)
    m.inc_env_steps(100)
    m.record_episodes([10.0, 30.0])
    m.sample(now=m._t_last + 2.0)
    s = text(m)
    assert s["kilorl_env_steps_per_second"][0][1] == 50.0
    assert s["kilorl_episode_return"][0][1] == 20.0
    m.inc_env_steps(10)
    m.sample(now=m._t_last + 1.0)
    s = text(m)
    assert s["kilorl_env_steps_per_second"][0][1] == 10.0
    assert s["kilorl_episode_return"][0][1] == 20.0  # no episode finished: the last mean stands
    assert s["kilorl_env_steps_total"][0][1] == 110.0 and s["kilorl_episodes_total"][0][1] == 2.0


def test_a_role_exports_only_what_it_reports():
    m = RoleMetrics("learner", 0, "n0", sample_resources=False)
    m.observe_learner_update(0.1)
    s = text(m)
    assert "kilorl_learner_update_seconds_count" in s
    assert "kilorl_env_steps_total" not in s and "kilorl_param_publish_latency_seconds_count" not in s


def test_device_readings_become_series_and_feed_a_device_leak_detector_then_vanish_with_the_device():
    m = RoleMetrics("learner", 0, "n0", sample_resources=False)
    dev = DeviceReading("0", allocated_bytes=1 * GiB, reserved_bytes=2 * GiB, process_bytes=2.5 * GiB,
                        utilization_ratio=0.75, free_bytes=10 * GiB)
    status = m._sample_memory(0.0, ResourceReading(rss_bytes=1 * GiB, host_available_bytes=4 * GiB, devices=[dev]))
    assert [(st.memory, st.limit_bytes) for st in status] == [("host", 5 * GiB), ("device:0", 12 * GiB)]
    s = text(m)
    assert s["kilorl_device_memory_reserved_bytes"] == [({"role": "learner", "rank": "0", "node": "n0", "device": "0"},
                                                         2 * GiB)]
    assert s["kilorl_gpu_utilization_ratio"][0][1] == 0.75
    m._sample_memory(1.0, ResourceReading(rss_bytes=1 * GiB, host_available_bytes=4 * GiB, devices=[]))
    s = text(m)
    for name in ("kilorl_device_memory_allocated_bytes", "kilorl_device_memory_reserved_bytes",
                 "kilorl_device_process_memory_bytes", "kilorl_gpu_utilization_ratio"):
        assert name not in s


def test_a_memory_budget_caps_the_host_limit_and_a_leak_is_forecast_against_it():
    m = RoleMetrics("actor", 0, "n0", sample_resources=False, memory_budget_bytes=2 * GiB)
    last = None
    for t in range(120):
        rss = 1 * GiB + max(0, t - 30) * 8 * 2**20  # a leak of 8 MiB/s from t=30 s
        last = m._sample_memory(float(t), ResourceReading(rss_bytes=rss, host_available_bytes=20 * GiB))[0]
    assert last.limit_bytes == 2 * GiB and last.suspected
    expected = (2 * GiB - (1 * GiB + 89 * 8 * 2**20)) / (8 * 2**20)
    assert math.isclose(last.time_to_limit_s, expected, rel_tol=0.1)
    s = text(m)
    assert s["kilorl_memory_leak_suspected"][0][1] == 1.0
    assert math.isclose(s["kilorl_memory_time_to_limit_seconds"][0][1], last.time_to_limit_s)


def test_a_role_that_never_steps_an_environment_exports_no_steps_per_second():
    m = RoleMetrics("learner", 0, "n0", sample_resources=False)
    m.sample(now=m._t_last + 1.0)
    assert "kilorl_env_steps_per_second" not in text(m)
    m.inc_env_steps(4)
    m.sample(now=m._t_last + 1.0)
    assert text(m)["kilorl_env_steps_per_second"][0][1] == 4.0
