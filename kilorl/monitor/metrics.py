"""Every metric kiloRL exports, defined once.

Names follow the Prometheus conventions: a ``kilorl_`` prefix, base units in the name
(``_seconds``, ``_bytes``, ``_ratio`` for 0-1 values), ``_total`` on counters, and
histograms (not summaries) for latencies so they aggregate across roles. Every series
also carries the identity labels ``role``, ``rank`` and ``node`` of the process that
reported it (added by :class:`kilorl.monitor.reporter.RoleMetrics`); ``extra_labels``
lists the labels a metric adds on top of those.

The dashboard (:mod:`kilorl.monitor.dashboard`), the docs (docs/monitor.md) and the
Prometheus integration test all read this table, so a metric added here is a metric
they check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge", "histogram"]

IDENTITY_LABELS: tuple[str, ...] = ("role", "rank", "node")
"""Labels on every series: which role process reported it."""

LATENCY_BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Histogram buckets for sub-millisecond to half-minute latencies."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its full exposition name, kind, help text and extra labels."""

    name: str
    kind: MetricKind
    help: str
    extra_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    cpu_present: bool = True
    """False for series that only exist where a GPU does (absent on CPU, never fake zeros)."""

    @property
    def base_name(self) -> str:
        """The name prometheus_client wants (counters without their ``_total`` suffix)."""
        return self.name[: -len("_total")] if self.kind == "counter" else self.name

    @property
    def labels(self) -> tuple[str, ...]:
        return IDENTITY_LABELS + self.extra_labels


def _c(name: str, help: str, *extra: str) -> MetricSpec:
    return MetricSpec(name, "counter", help, tuple(extra))


def _g(name: str, help: str, *extra: str, cpu: bool = True) -> MetricSpec:
    return MetricSpec(name, "gauge", help, tuple(extra), cpu_present=cpu)


def _h(name: str, help: str, *extra: str) -> MetricSpec:
    return MetricSpec(name, "histogram", help, tuple(extra))


METRICS: tuple[MetricSpec, ...] = (
    # Environments (actors).
    _c("kilorl_env_steps_total", "Environment steps taken (summed over the role's vectorized envs)."),
    _c("kilorl_episodes_total", "Episodes finished."),
    _g("kilorl_env_steps_per_second", "Environment steps per second of this role over its last report period."),
    _g("kilorl_episode_return", "Mean return of the episodes finished in the role's last report period."),
    _g("kilorl_policy_lag_versions", "Parameter versions between the policy an actor acts with and the newest published."),
    # Learners and parameters.
    _h("kilorl_learner_update_seconds", "Wall time of one learner update (all epochs over one batch)."),
    _h("kilorl_param_publish_latency_seconds", "Time from a parameter version being published to this actor holding it."),
    _c("kilorl_comm_bytes_total", "Bytes moved by this role's communication, by direction (sent, received).", "direction"),
    # Data system.
    _g("kilorl_store_tier_used_bytes", "Bytes held in one store tier (device, host, disk).", "tier"),
    _g("kilorl_store_tier_capacity_bytes", "Capacity of one store tier.", "tier"),
    _c("kilorl_store_hits_total", "Store reads served from this tier.", "tier"),
    _c("kilorl_store_misses_total", "Store reads that missed this tier.", "tier"),
    # Memory and devices.
    _g("kilorl_process_resident_memory_bytes", "Resident set size of the role process (host RAM)."),
    _g("kilorl_device_memory_allocated_bytes", "Device memory in tensors (torch memory_allocated).", "device", cpu=False),
    _g("kilorl_device_memory_reserved_bytes", "Device memory cached (torch memory_reserved).", "device", cpu=False),
    _g("kilorl_device_process_memory_bytes", "Device memory NVML attributes to the role's process.", "device", cpu=False),
    _g("kilorl_gpu_utilization_ratio", "NVML utilisation (0-1) of a device the role uses.", "device", cpu=False),
    # Leak detection and migration.
    _g("kilorl_memory_leak_slope_bytes_per_second", "Robust (Theil-Sen) growth rate of a memory series of the role.", "memory"),
    _g("kilorl_memory_leak_suspected", "1 while the leak detector flags the memory series, else 0.", "memory"),
    _g("kilorl_memory_time_to_limit_seconds", "Predicted seconds until the series reaches its limit (+Inf: no leak).", "memory"),
    _g("kilorl_memory_limit_bytes", "Limit the time-to-limit is against (budget, free device memory, RAM).", "memory"),
    _c("kilorl_migration_events_total", "Migration events the driver took for a role.", "subject_role", "subject_rank", "event"),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}

EXPORTER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("kilorl_role_up", "gauge", "1 for every role currently reporting to this node's exporter.", ()),
    MetricSpec(
        "kilorl_role_last_report_age_seconds", "gauge", "Seconds since the role's last snapshot reached the exporter.", ()
    ),
    MetricSpec("kilorl_exporter_roles_departed_total", "counter", "Role processes whose series this exporter dropped.", ()),
)
"""Series the node exporter adds itself (``role_up`` and age carry the identity labels)."""


def spec(name: str) -> MetricSpec:
    """The spec of a metric by its exposition name; a clear error for unknown names."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown kilorl metric {name!r}; known: {sorted(BY_NAME)}") from None
