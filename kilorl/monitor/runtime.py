"""Wiring helpers: what the driver and each node start, in a few calls.

* The driver: ``DriverMonitor(run_dir, config, node)`` starts its node's exporter on
  ``config.port``, keeps ``RUN_DIR/monitor/targets.json`` (file-based discovery) and writes
  ``RUN_DIR/monitor/prometheus.yml``; ``describe()`` is what ``kilorl train`` prints.
* Another node: ``start_node_exporter(run_dir, node, config)``, then the driver calls
  ``add_node(node, exporter.address)`` (and ``remove_node`` when the node leaves).
* A role: ``role_metrics(run_dir, role, rank, node, config)`` finds its node's exporter.

Role and exporter agree on the socket path through :func:`socket_dir` alone (derived
from the run directory), so nothing has to be passed between them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

from kilorl.monitor.discovery import TargetsFile, node_socket_path, write_prometheus_config
from kilorl.monitor.exporter import NodeExporter
from kilorl.monitor.reporter import RoleMetrics
from kilorl.monitor.settings import MonitorConfig, PrometheusConfig

PORT_ATTEMPTS = 16
"""Ports tried from ``config.port`` upwards when it is taken (several nodes on one machine)."""


def socket_dir(run_dir: str | os.PathLike) -> Path:
    """A short per-run directory for the node sockets (run directories can be too deep for AF_UNIX)."""
    digest = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"kilorl-{os.getuid()}-{digest}"


def start_node_exporter(run_dir: str | os.PathLike, node: str, config: PrometheusConfig) -> NodeExporter:
    """The node's exporter on the first free port from ``config.port`` (0: any)."""
    sock = node_socket_path(socket_dir(run_dir), node)
    last: OSError | None = None
    for port in [0] if config.port == 0 else range(config.port, config.port + PORT_ATTEMPTS):
        try:
            return NodeExporter(node, sock, host=config.host, port=port, stale_after_s=config.stale_after_s).start()
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            last = e
    raise OSError(f"monitor.prometheus.port: ports {config.port}..{config.port + PORT_ATTEMPTS - 1} are all taken") from last


def role_metrics(
    run_dir: str | os.PathLike, role: str, rank: int, node: str, config: MonitorConfig, *, start: bool = True
) -> RoleMetrics:
    """A role's reporter, sending to its node's exporter (pushing in the background when ``start``)."""
    m = RoleMetrics(
        role, rank, node,
        sink=str(node_socket_path(socket_dir(run_dir), node)) if config.prometheus.enabled else None,
        push_interval_s=config.prometheus.push_interval_s,
        memory_budget_bytes=config.memory_budget_bytes.get(role),
        leak=config.leak,
    )
    return m.start() if start else m


class DriverMonitor:
    """The driver's side: its node's exporter, the targets file and the Prometheus config."""

    def __init__(self, run_dir: str | os.PathLike, config: MonitorConfig, node: str) -> None:
        self.dir = Path(run_dir) / "monitor"
        self.config = config
        self.exporter = start_node_exporter(run_dir, node, config.prometheus)
        self.targets = TargetsFile(self.dir / "targets.json")
        self.targets.set(node, self.exporter.address)
        self.prometheus_config = write_prometheus_config(
            self.dir / "prometheus.yml", self.targets.path, scrape_interval_s=config.prometheus.scrape_interval_s
        )

    def add_node(self, node: str, address: str) -> None:
        self.targets.set(node, address)

    def remove_node(self, node: str) -> None:
        self.targets.remove(node)

    def describe(self) -> str:
        """Where to scrape, for the start-of-run banner."""
        return (
            f"metrics: http://{self.exporter.address}/metrics (this node); targets file {self.targets.path}; "
            f"run Prometheus with --config.file={self.prometheus_config}"
        )

    def close(self) -> None:
        """End of run: every node's exporter goes away, so the targets file is emptied."""
        for node in self.targets.targets:
            self.targets.remove(node)
        self.exporter.stop()
