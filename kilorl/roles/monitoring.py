"""What each role reports to the monitor, wired by composition around the role objects.

The Ray shells (:mod:`kilorl.roles.remote`) build one of these next to their role when
the run has ``monitor.prometheus.enabled``; the roles themselves stay unaware of it.
The only interception point is the parameter store each role is given, wrapped here:

* the learner's wrapper stamps every published policy version with its publish time
  (one extra 8-byte tensor, :data:`PUBLISHED_AT`) and counts the bytes it publishes;
* the actor's wrapper reads that stamp when it fetches a new version (publish -> actor
  has it latency), counts the bytes it receives, and, each time it comes back for
  parameters, records how many versions behind the newest its last policy was
  (policy lag of the rollout it just delivered).

Everything else comes from what the roles already return (``RolloutInfo``, the
learner's update stats); host RSS and device memory are sampled by ``RoleMetrics``
itself once per push, which also feeds the leak detectors (docs/monitor.md).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilorl.algos import keys
from kilorl.core import ParameterStore, RolloutInfo
from kilorl.monitor.faults import LeakInjector
from kilorl.monitor.migration import MemoryStatus
from kilorl.monitor.reporter import RoleMetrics
from kilorl.monitor.runtime import role_metrics
from kilorl.monitor.settings import MonitorConfig

log = logging.getLogger(__name__)

PUBLISHED_AT = "monitor/published_at"
"""Tensor added to each published policy version: the publisher's wall clock (seconds, float64)."""


@dataclass(frozen=True)
class MonitorSpec:
    """What a role needs to find its node's exporter: the run directory and the monitor section."""

    run_dir: str
    config: MonitorConfig
    replacement: bool = False
    """The role replaces one moved away by a migration: injected faults (``monitor.inject_leaks``) stay behind."""


def injected_leak(spec: MonitorSpec, role: str, rank: int) -> LeakInjector | None:
    """The fault-injection leak this role process is configured to have (started), if any."""
    if spec.replacement:
        return None
    for leak in spec.config.inject_leaks:
        if leak.role == role and leak.rank == rank:
            log.warning("monitor: fault injection: %s[%d] leaks %.1f MiB/s", role, rank, leak.bytes_per_s / 2**20)
            return LeakInjector(leak.bytes_per_s, leak.start_after_s).start()
    return None


def node_label(node_id: str) -> str:
    """The ``node`` label of a Ray node: a short prefix of its id (stable for the node's life)."""
    return node_id[:12]


def current_node() -> str:
    """The ``node`` label of the node this process runs on."""
    import ray

    return node_label(ray.get_runtime_context().get_node_id())


def _nbytes(tensors: dict[str, Any]) -> int:
    return int(sum(getattr(v, "nbytes", 0) for v in tensors.values()))


class _StoreWrapper:
    """Forwards every call to ``inner``; subclasses intercept what they measure.

    Duck-typed rather than a ``ParameterStore`` subclass on purpose: any method a
    concrete store adds is forwarded as it is, so the wrapper never hides one.
    """

    def __init__(self, inner: ParameterStore, metrics: RoleMetrics) -> None:
        self.inner, self.metrics = inner, metrics

    def publish(self, name: str, version: int, tensors: dict[str, Any]) -> None:
        self.inner.publish(name, version, tensors)

    def latest_version(self, name: str) -> int | None:
        return self.inner.latest_version(name)

    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None,
              share: bool = False) -> tuple[int, dict[str, Any]]:
        return self.inner.fetch(name, version, layout, share)

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        return self.inner.wait(name, min_version, timeout)

    def fetch_into(self, name: str, out: dict[str, Any], version: int | None = None,
                   layout: list[str] | None = None) -> int:
        return self.inner.fetch_into(name, out, version, layout)

    def __getattr__(self, item: str) -> Any:  # anything else the concrete store offers
        return getattr(self.inner, item)


class PublishingStore(_StoreWrapper):
    """The learner's store: stamps each policy version with its publish time, counts bytes sent."""

    def publish(self, name: str, version: int, tensors: dict[str, Any]) -> None:
        if name == keys.POLICY:
            tensors = {**tensors, PUBLISHED_AT: np.array([time.time()], np.float64)}
        self.inner.publish(name, version, tensors)
        self.metrics.add_comm_bytes("sent", _nbytes(tensors))


class FetchingStore(_StoreWrapper):
    """The actor's store: publish -> has-it latency, bytes received, policy lag at each return."""

    def __init__(self, inner: ParameterStore, metrics: RoleMetrics) -> None:
        super().__init__(inner, metrics)
        self.held = -1
        self._stamped = True
        self._stamp: Any = None
        """The tensor ``fetch_into`` reads the publish stamp into (made at the first)."""

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        latest = self.inner.wait(name, min_version, timeout)
        if name == keys.POLICY and self.held >= 0:
            self.metrics.set_policy_lag(max(latest - self.held, 0))
        return latest

    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None,
              share: bool = False) -> tuple[int, dict[str, Any]]:
        if name != keys.POLICY or layout is None or not self._stamped:
            return self._received(*self.inner.fetch(name, version, layout, share), name)
        try:
            got, tensors = self.inner.fetch(name, version, [*layout, PUBLISHED_AT], share)
        except KeyError:  # a publisher without the stamp: measure without it from now on
            log.info("monitor: parameters carry no publish time; publish latency is not measured")
            self._stamped = False
            return self._received(*self.inner.fetch(name, version, layout, share), name)
        stamp = tensors.pop(PUBLISHED_AT, None)
        if stamp is not None:
            self.metrics.observe_publish_latency(max(time.time() - float(np.asarray(stamp).reshape(-1)[0]), 0.0))
        return self._received(got, tensors, name)

    def fetch_into(self, name: str, out: dict[str, Any], version: int | None = None,
                   layout: list[str] | None = None) -> int:
        names = list(out) if layout is None else list(layout)
        if name != keys.POLICY or not self._stamped:
            return self._received(self.inner.fetch_into(name, out, version, names), {k: out[k] for k in names}, name)[0]
        if self._stamp is None:
            import torch

            self._stamp = torch.zeros(1, dtype=torch.float64)  # the learner stamps one float64
        try:
            got = self.inner.fetch_into(name, {**out, PUBLISHED_AT: self._stamp}, version, [*names, PUBLISHED_AT])
        except KeyError:  # a publisher without the stamp: measure without it from now on
            log.info("monitor: parameters carry no publish time; publish latency is not measured")
            self._stamped = False
            return self.fetch_into(name, out, version, names)
        self.metrics.observe_publish_latency(max(time.time() - float(self._stamp[0]), 0.0))
        return self._received(got, {k: out[k] for k in names}, name)[0]

    def _received(self, version: int, tensors: dict[str, Any], name: str) -> tuple[int, dict[str, Any]]:
        self.metrics.add_comm_bytes("received", _nbytes(tensors))
        if name == keys.POLICY:
            self.held = version
        return version, tensors


class ActorReporting:
    """An actor's metrics: env steps, episodes and returns from each rollout's info."""

    def __init__(self, spec: MonitorSpec, index: int, store: ParameterStore) -> None:
        self.metrics = role_metrics(spec.run_dir, "actor", index, current_node(), spec.config)
        self.store = FetchingStore(store, self.metrics)
        self.leak = injected_leak(spec, "actor", index)

    def rollout(self, info: RolloutInfo) -> None:
        self.metrics.inc_env_steps(info["env_steps"])
        self.metrics.record_episodes(info["episode_returns"])

    def memory_status(self) -> list[MemoryStatus]:
        """The leak detectors' latest verdicts (what the driver's migration policy reads)."""
        return self.metrics.memory_status

    def close(self) -> None:
        if self.leak is not None:
            self.leak.stop()
        self.metrics.close()


class LearnerReporting:
    """A learner's metrics: update time and gradient all-reduce bytes from its update stats."""

    def __init__(self, spec: MonitorSpec, rank: int, store: ParameterStore) -> None:
        self.metrics = role_metrics(spec.run_dir, "learner", rank, current_node(), spec.config)
        self.store = PublishingStore(store, self.metrics)
        self.leak = injected_leak(spec, "learner", rank)

    def update(self, stats: dict[str, float]) -> None:
        if "learner_update_s" in stats:
            self.metrics.observe_learner_update(stats["learner_update_s"])
        reduced = int(stats.get("comm_bytes_sent", 0))
        if reduced:  # every rank sends and receives its gradients' worth in an all-reduce
            self.metrics.add_comm_bytes("sent", reduced)
            self.metrics.add_comm_bytes("received", reduced)

    def memory_status(self) -> list[MemoryStatus]:
        """The leak detectors' latest verdicts (what the driver's migration policy reads)."""
        return self.metrics.memory_status

    def close(self) -> None:
        if self.leak is not None:
            self.leak.stop()
        self.metrics.close()
