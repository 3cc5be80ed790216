"""The per-role side of the metrics: :class:`RoleMetrics`.

A role process creates one ``RoleMetrics(role, rank, node)``, calls its ``inc_*`` /
``set_*`` / ``observe_*`` methods from its hot path (each is a prometheus_client
operation on a private registry: well under a microsecond), and either lets the
background pusher send a snapshot to the node exporter every ``push_interval_s`` or
calls :meth:`push` itself. Each snapshot also samples the process's memory, feeds the
leak detectors and exports their verdicts.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kilorl.monitor.leak import LeakDetector
from kilorl.monitor.metrics import METRICS, MetricSpec, spec
from kilorl.monitor.migration import MemoryStatus
from kilorl.monitor.resources import ResourceReading, ResourceSampler
from kilorl.monitor.settings import LeakDetectorConfig
from kilorl.monitor.wire import Family, Snapshot, encode_snapshot

log = logging.getLogger(__name__)


def _make(s: MetricSpec, registry: CollectorRegistry):
    if s.kind == "counter":
        return Counter(s.base_name, s.help, s.labels, registry=registry)
    if s.kind == "gauge":
        return Gauge(s.name, s.help, s.labels, registry=registry)
    return Histogram(s.name, s.help, s.labels, buckets=s.buckets, registry=registry)


class RoleMetrics:
    """Metrics of one role process, labelled ``role``, ``rank``, ``node``."""

    def __init__(
        self,
        role: str,
        rank: int,
        node: str,
        *,
        sink: str | None = None,
        push_interval_s: float = 1.0,
        memory_budget_bytes: float | None = None,
        leak: LeakDetectorConfig | None = None,
        sample_resources: bool = True,
    ) -> None:
        if not role or not node:
            raise ValueError("RoleMetrics: 'role' and 'node' must be non-empty strings")
        self.role, self.rank, self.node = role, int(rank), node
        self.sink, self.push_interval_s = sink, push_interval_s
        self.memory_budget_bytes = memory_budget_bytes
        self.registry = CollectorRegistry(auto_describe=False)
        self._m = {s.name: _make(s, self.registry) for s in METRICS}
        self._id = (role, str(self.rank), node)
        self._children: dict[tuple[str, ...], object] = {}
        self._sampler = ResourceSampler() if sample_resources else None
        self._leak_config = leak or LeakDetectorConfig()
        self._detectors: dict[str, LeakDetector] = {}
        self._devices: set[str] = set()
        self._returns: list[float] = []
        self._steps = 0  # cumulative, written only by the hot path; sample() reads deltas
        self._steps_seen = 0
        self._t_last = time.monotonic()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: list[MemoryStatus] = []
        # Hot-path children, bound on first use (a series exists only once the role reports it).
        self._env_steps = self._update_s = self._publish_s = None

    # -- hot-path API -------------------------------------------------------------------------------
    def child(self, name: str, *extra: str):
        """The labelled prometheus_client child of a metric (identity labels filled in), cached."""
        key = (name, *extra)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = self._m[spec(name).name].labels(*self._id, *extra)
        return c

    def _bind(self, attr: str, name: str):
        c = self.child(name)
        setattr(self, attr, c)
        return c

    def inc_env_steps(self, n: int) -> None:
        c = self._env_steps or self._bind("_env_steps", "kilorl_env_steps_total")
        c.inc(n)
        self._steps += n

    def record_episodes(self, returns: Iterable[float]) -> None:
        """Episodes that finished: counts them and folds their returns into this period's mean."""
        rs = [float(r) for r in returns]
        if rs:
            self.child("kilorl_episodes_total").inc(len(rs))
            with self._lock:
                self._returns.extend(rs)

    def set_policy_lag(self, versions: float) -> None:
        self.child("kilorl_policy_lag_versions").set(versions)

    def observe_learner_update(self, seconds: float) -> None:
        (self._update_s or self._bind("_update_s", "kilorl_learner_update_seconds")).observe(seconds)

    def observe_publish_latency(self, seconds: float) -> None:
        (self._publish_s or self._bind("_publish_s", "kilorl_param_publish_latency_seconds")).observe(seconds)

    def add_comm_bytes(self, direction: str, n: int) -> None:
        if direction not in ("sent", "received"):
            raise ValueError(f"add_comm_bytes: 'direction' must be 'sent' or 'received', got {direction!r}")
        self.child("kilorl_comm_bytes_total", direction).inc(n)

    def set_store_tier(self, tier: str, used_bytes: float, capacity_bytes: float) -> None:
        self.child("kilorl_store_tier_used_bytes", tier).set(used_bytes)
        self.child("kilorl_store_tier_capacity_bytes", tier).set(capacity_bytes)

    def inc_store_lookups(self, tier: str, hits: int = 0, misses: int = 0) -> None:
        self.child("kilorl_store_hits_total", tier).inc(hits)
        self.child("kilorl_store_misses_total", tier).inc(misses)

    def record_migration(self, subject_role: str, subject_rank: int, event: str) -> None:
        """A migration event the driver took (decided, started, completed, failed, no_room)."""
        self.child("kilorl_migration_events_total", subject_role, str(subject_rank), event).inc()

    # -- periodic sampling ----------------------------------------------------------------------------
    def sample(self, now: float | None = None) -> list[MemoryStatus]:
        """Update the per-period gauges, read memory, run the leak detectors; returns their status."""
        now = time.monotonic() if now is None else now
        total = self._steps
        with self._lock:
            dt, steps, rets = now - self._t_last, total - self._steps_seen, self._returns
            self._t_last, self._steps_seen, self._returns = now, total, []
        if dt > 0 and self._env_steps is not None:  # only roles that step environments have a rate
            self.child("kilorl_env_steps_per_second").set(steps / dt)
        if rets:
            self.child("kilorl_episode_return").set(sum(rets) / len(rets))
        if self._sampler is not None:
            self._status = self._sample_memory(now, self._sampler.read())
        return self._status

    def observe_memory(self, reading: ResourceReading, now: float | None = None) -> list[MemoryStatus]:
        """Memory of a process this object does not sample itself (e.g. a store worker read
        through its ``stats``): sets the memory gauges and runs the leak detectors on it."""
        self._status = self._sample_memory(time.monotonic() if now is None else now, reading)
        return self._status

    def _sample_memory(self, now: float, r: ResourceReading) -> list[MemoryStatus]:
        self.child("kilorl_process_resident_memory_bytes").set(r.rss_bytes)
        host_limit = r.rss_bytes + r.host_available_bytes
        if self.memory_budget_bytes:
            host_limit = min(host_limit, self.memory_budget_bytes)
        series = [("host", r.rss_bytes, host_limit)]
        seen = set()
        for d in r.devices:
            seen.add(d.device)
            for name, value in (
                ("kilorl_device_memory_allocated_bytes", d.allocated_bytes),
                ("kilorl_device_memory_reserved_bytes", d.reserved_bytes),
                ("kilorl_device_process_memory_bytes", d.process_bytes),
                ("kilorl_gpu_utilization_ratio", d.utilization_ratio),
            ):
                if value is not None:
                    self.child(name, d.device).set(value)
            used = d.reserved_bytes if d.reserved_bytes is not None else d.process_bytes
            if used is not None:
                series.append((f"device:{d.device}", used, used + d.free_bytes if d.free_bytes is not None else None))
        for gone in self._devices - seen:
            for name in ("kilorl_device_memory_allocated_bytes", "kilorl_device_memory_reserved_bytes",
                         "kilorl_device_process_memory_bytes", "kilorl_gpu_utilization_ratio"):
                if self._children.pop((name, gone), None) is not None:
                    self._m[name].remove(*self._id, gone)
        self._devices = seen
        return [self._detect(now, memory, value, limit) for memory, value, limit in series]

    def _detect(self, now: float, memory: str, value: float, limit: float | None) -> MemoryStatus:
        det = self._detectors.setdefault(memory, LeakDetector(self._leak_config))
        v = det.update(now, value, limit)
        if not math.isnan(v.slope_bytes_per_s):
            self.child("kilorl_memory_leak_slope_bytes_per_second", memory).set(v.slope_bytes_per_s)
        self.child("kilorl_memory_leak_suspected", memory).set(1.0 if v.suspected else 0.0)
        self.child("kilorl_memory_time_to_limit_seconds", memory).set(v.time_to_limit_s)
        if limit is not None:
            self.child("kilorl_memory_limit_bytes", memory).set(limit)
        return MemoryStatus(self.role, self.rank, self.node, memory, v.suspected, v.slope_bytes_per_s,
                            v.level_bytes, limit, v.time_to_limit_s)

    @property
    def memory_status(self) -> list[MemoryStatus]:
        """The leak detectors' view after the last :meth:`sample` (what a migration policy reads)."""
        return list(self._status)

    # -- transport ----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        families = []
        for m in self.registry.collect():
            samples = [(s.name, dict(s.labels), s.value) for s in m.samples if not s.name.endswith("_created")]
            if samples:
                families.append(Family(m.name, m.type, m.documentation, samples))
        return Snapshot(self.role, self.rank, self.node, os.getpid(), time.time(), families)

    def push(self) -> bool:
        """Sample and send one snapshot to the node exporter; False (and a retry next time) if it is not there."""
        self.sample()
        if self.sink is None:
            return False
        frame = encode_snapshot(self.snapshot())
        try:
            if self._sock is None:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5.0)
                s.connect(self.sink)
                self._sock = s
            self._sock.sendall(frame)
            return True
        except OSError as e:
            log.debug("monitor: exporter at %s not reachable (%s); retrying next period", self.sink, e)
            self._disconnect()
            return False

    def _disconnect(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def start(self) -> RoleMetrics:
        """Push in a daemon thread every ``push_interval_s`` until :meth:`close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"kilorl-metrics-{self.role}-{self.rank}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.push()
            except Exception:  # a metrics failure must never take the role down
                log.exception("monitor: push failed")
            self._stop.wait(self.push_interval_s)

    def close(self) -> None:
        """Stop pushing and disconnect: the exporter drops this role's series at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._disconnect()
