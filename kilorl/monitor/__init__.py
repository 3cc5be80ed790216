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

import importlib
from typing import Any

# Imported on first use, so that `python -m kilorl.monitor.exporter` and light users
# (the leak detector alone) do not load every submodule.
_LAZY = {
    "METRICS": "kilorl.monitor.metrics",
    "MetricSpec": "kilorl.monitor.metrics",
    "NodeExporter": "kilorl.monitor.exporter",
    "LeakDetector": "kilorl.monitor.leak",
    "LeakVerdict": "kilorl.monitor.leak",
    "MemoryStatus": "kilorl.monitor.migration",
    "MigrationDecision": "kilorl.monitor.migration",
    "MigrationPolicy": "kilorl.monitor.migration",
    "RoleMetrics": "kilorl.monitor.reporter",
    "LeakDetectorConfig": "kilorl.monitor.settings",
    "MigrationConfig": "kilorl.monitor.settings",
    "MonitorConfig": "kilorl.monitor.settings",
    "PrometheusConfig": "kilorl.monitor.settings",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kilorl.monitor' has no attribute {name!r}")


__all__ = sorted(_LAZY)
