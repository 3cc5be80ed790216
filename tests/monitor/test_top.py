"""``kilorl top``'s view: roles read from a run's real exporters through its targets file."""

from __future__ import annotations

import pytest

from kilorl.monitor.runtime import DriverMonitor, role_metrics
from kilorl.monitor.settings import LeakDetectorConfig, MonitorConfig, PrometheusConfig
from kilorl.monitor.top import collect, read_targets, render
from tests.monitor.conftest import wait_for


def test_top_shows_each_role_with_its_throughput_and_memory(tmp_path):
    cfg = MonitorConfig(prometheus=PrometheusConfig(enabled=True, port=0, push_interval_s=0.1),
                        leak=LeakDetectorConfig(warmup_s=0.0, window_s=2.0, min_samples=6))
    driver = DriverMonitor(tmp_path / "run", cfg, "n0")
    actor = role_metrics(tmp_path / "run", "actor", 1, "n0", cfg)
    learner = role_metrics(tmp_path / "run", "learner", 0, "n0", cfg)
    try:
        actor.inc_env_steps(640)
        actor.record_episodes([20.0, 30.0])
        actor.set_policy_lag(2)

        def both() -> object:
            rows, errors = collect(tmp_path / "run")
            done = {(r.role, r.rank) for r in rows if r.slope} == {("actor", "1"), ("learner", "0")}
            return (rows, errors) if done and any(r.episode_return for r in rows) else None

        rows, errors = wait_for(both, 20, "both roles with a memory verdict")
        assert errors == []
        a = next(r for r in rows if r.role == "actor")
        assert (a.env_steps, a.episode_return, a.policy_lag, a.node) == (640, 25.0, 2, "n0")
        assert a.rss_bytes > 10 * 2**20 and "host" in a.slope
        lines = render(rows, errors).splitlines()
        assert lines[1].split()[:6] == ["actor", "1", "n0", "640", lines[1].split()[4], "25.0"]
        assert lines[2].startswith("learner")
    finally:
        actor.close()
        learner.close()
        driver.close()
    assert read_targets(tmp_path / "run") == {}


def test_top_names_the_missing_targets_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="monitor.prometheus.enabled"):
        collect(tmp_path)


def test_an_unreachable_exporter_is_listed_not_fatal(tmp_path):
    from kilorl.monitor.discovery import TargetsFile

    TargetsFile(tmp_path / "monitor" / "targets.json").set("gone", "127.0.0.1:1")
    rows, errors = collect(tmp_path)
    assert rows == [] and len(errors) == 1 and errors[0].startswith("node gone (127.0.0.1:1)")
    assert "unreachable: node gone" in render(rows, errors)


def test_a_role_whose_memory_is_not_watched_shows_no_trend():
    from kilorl.monitor.top import RoleRow, _trend

    assert _trend(RoleRow(role="store", rank="0", node="n0")) == "-"
    assert _trend(RoleRow(role="actor", rank="0", node="n0", rss_bytes=1e8)) == "warming up"
