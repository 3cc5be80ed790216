"""The wiring helpers: a driver, a second node and a role find each other through the run directory."""

from __future__ import annotations

import json
import socket

import pytest

from kilorl.monitor.runtime import DriverMonitor, role_metrics, socket_dir, start_node_exporter
from kilorl.monitor.settings import MonitorConfig, PrometheusConfig
from tests.monitor.conftest import free_port, wait_for
from tests.monitor.helpers import identities


def test_driver_node_and_role_meet_through_the_run_directory(tmp_path):
    cfg = MonitorConfig(prometheus=PrometheusConfig(enabled=True, port=free_port(), push_interval_s=0.2))
    driver = DriverMonitor(tmp_path / "run", cfg, "n0")
    other = start_node_exporter(tmp_path / "run", "n1", cfg.prometheus)  # same machine: the next free port
    try:
        assert other.port != driver.exporter.port
        driver.add_node("n1", other.address)
        groups = json.loads(driver.targets.path.read_text())
        assert {g["labels"]["exporter_node"]: g["targets"][0] for g in groups} == {
            "n0": driver.exporter.address, "n1": other.address}
        assert str(driver.targets.path) in driver.describe() and driver.exporter.address in driver.describe()
        m = role_metrics(tmp_path / "run", "actor", 0, "n1", cfg)
        m.inc_env_steps(3)
        wait_for(lambda: ("actor", "0", "n1") in identities(other.exposition().decode(), "kilorl_env_steps_total"), 10,
                 "the role's series on its node's exporter")
        m.close()
    finally:
        other.stop()
        driver.close()
    assert json.loads(driver.targets.path.read_text()) == []


def test_socket_directory_is_short_even_for_deep_run_directories(tmp_path):
    deep = tmp_path.joinpath(*["very-long-directory-name"] * 10)
    assert len(str(socket_dir(deep))) < 60


def hold_port_range(count: int, attempts: int = 50) -> tuple[int, list[socket.socket]]:
    """``count`` consecutive loopback ports, all bound here (other tests' sockets may sit in a
    first range picked: try another one)."""
    for _ in range(attempts):
        port, held = free_port(), []
        for p in range(port, port + count):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                s.close()
                break
            held.append(s)
        if len(held) == count:
            return port, held
        for s in held:
            s.close()
    pytest.fail(f"no {count} consecutive free loopback ports in {attempts} tries")


def test_a_taken_port_range_is_a_clear_error(tmp_path):
    port, held = hold_port_range(16)
    try:
        with pytest.raises(OSError, match="monitor.prometheus.port"):
            start_node_exporter(tmp_path, "n0", PrometheusConfig(enabled=True, port=port))
    finally:
        for s in held:
            s.close()


def test_without_prometheus_a_role_still_samples_and_detects_but_sends_nothing(tmp_path):
    m = role_metrics(tmp_path, "actor", 0, "n0", MonitorConfig(), start=False)
    assert m.sink is None and not m.push()
    assert [s.memory for s in m.memory_status] == ["host"]
