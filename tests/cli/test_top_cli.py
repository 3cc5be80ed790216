"""``kilorl top RUN_DIR`` prints the run's roles once, and names what is missing."""

from __future__ import annotations

from kilorl.monitor.runtime import DriverMonitor, role_metrics
from kilorl.monitor.settings import MonitorConfig, PrometheusConfig
from tests.monitor.conftest import wait_for
from tests.monitor.helpers import identities


def test_top_once_prints_one_line_per_reporting_role(kilorl_cli, tmp_path):
    cfg = MonitorConfig(prometheus=PrometheusConfig(enabled=True, port=0, push_interval_s=0.1))
    driver = DriverMonitor(tmp_path, cfg, "n0")
    role = role_metrics(tmp_path, "actor", 3, "n0", cfg)
    try:
        role.inc_env_steps(128)
        wait_for(lambda: ("actor", "3", "n0") in identities(driver.exporter.exposition().decode(),
                                                            "kilorl_env_steps_total"), 10, "the role's first push")
        res = kilorl_cli("top", str(tmp_path), "--once", timeout=60)
    finally:
        role.close()
        driver.close()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["role", "rank", "node"]
    assert lines[1].split()[:4] == ["actor", "3", "n0", "128"]


def test_top_on_a_run_without_monitoring_exits_2_and_says_why(kilorl_cli, tmp_path):
    res = kilorl_cli("top", str(tmp_path), "--once", timeout=60)
    assert res.returncode == 2
    assert "targets.json" in res.stderr and "monitor.prometheus.enabled" in res.stderr
