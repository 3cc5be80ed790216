"""Observability and memory safety: Prometheus metrics, leak detection, migration decisions.

* :mod:`~kilorl.monitor.metrics`: every metric, defined once.
* :class:`RoleMetrics`: what a role process reports (hot-path counters, memory, leak verdicts).
* :class:`NodeExporter`: one per node; merges its roles' snapshots, serves ``/metrics``.
* :mod:`~kilorl.monitor.discovery`: the file-based service-discovery targets file and the
  generated Prometheus configuration.
* :class:`LeakDetector`, :class:`MigrationPolicy`: trend detection and the decision to move a role.
* :mod:`~kilorl.monitor.dashboard`: the Grafana dashboard, generated from code.

This layer sits beside the store and placement (docs/architecture.md, "Layers"): it knows
nothing of RL, configs or Ray; the trainer and roles call into it.
"""

from __future__ import annotations

from kilorl.monitor.exporter import NodeExporter
from kilorl.monitor.leak import LeakDetector, LeakVerdict
from kilorl.monitor.metrics import METRICS, MetricSpec
from kilorl.monitor.migration import MemoryStatus, MigrationDecision, MigrationPolicy
from kilorl.monitor.reporter import RoleMetrics
from kilorl.monitor.settings import LeakDetectorConfig, MigrationConfig, MonitorConfig, PrometheusConfig

__all__ = [
    "METRICS",
    "LeakDetector",
    "LeakDetectorConfig",
    "LeakVerdict",
    "MemoryStatus",
    "MetricSpec",
    "MigrationConfig",
    "MigrationDecision",
    "MigrationPolicy",
    "MonitorConfig",
    "NodeExporter",
    "PrometheusConfig",
    "RoleMetrics",
]
