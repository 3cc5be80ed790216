"""Store-tier usage of a run's store workers, reported to the monitor by the driver.

Parameters (and, with ``store.transport: store``, rollouts) live in the run's store
workers, one per node (kilorl.trainer.store_fleet). Every ``monitor.prometheus.push_interval_s``
(the roles' own reporting period) the driver
asks each worker for its ``stats`` and reports, as role ``store`` with the worker's rank
(the head's worker first, as ``StoreFleet.workers``) and the worker's ``node`` label,
``kilorl_store_tier_used_bytes`` and ``kilorl_store_tier_capacity_bytes`` per tier
(``device``, ``host`` for the shared-memory arena, ``disk``), and the lookups behind the
hit rates: ``kilorl_store_hits_total{tier}`` counts reads that tier served,
``kilorl_store_misses_total{tier}`` reads that had to go past it to a colder one (host:
reads served from disk or L2; disk: from L2), from the workers' ``reads_<tier>``
counters. The series go through the driver's node exporter.

The same reading carries the worker process's resident memory (``process`` in ``stats``):
the driver runs each worker's leak detector on it (``memory_status``), so a store worker
that leaks is moved away like any role (kilorl.trainer.migration).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kilorl.monitor.discovery import node_socket_path
from kilorl.monitor.migration import MemoryStatus
from kilorl.monitor.reporter import RoleMetrics
from kilorl.monitor.resources import ResourceReading
from kilorl.monitor.runtime import socket_dir
from kilorl.monitor.settings import MonitorConfig
from kilorl.roles.monitoring import node_label

log = logging.getLogger(__name__)

TIER_LABELS = {"device": "device", "dram": "host", "disk": "disk"}
"""Store tier name -> the metrics' ``tier`` label."""


def tier_lookups(counters: dict[str, int]) -> dict[str, tuple[int, int]]:
    """``{tier label: (hits, misses)}`` from a worker's cumulative ``reads_<tier>`` counters."""
    reads = {t: int(counters.get(f"reads_{t}", 0)) for t in ("device", "dram", "disk", "l2")}
    return {"device": (reads["device"], 0), "host": (reads["dram"], reads["disk"] + reads["l2"]),
            "disk": (reads["disk"], reads["l2"])}


def tier_usage(stats: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """``{tier label: (used bytes, capacity bytes)}`` from a worker's ``stats`` reply."""
    out = {}
    for tier, label in TIER_LABELS.items():
        t = stats.get("tiers", {}).get(tier)
        if t is not None and "used" in t and "capacity" in t:
            out[label] = (float(t["used"]), float(t["capacity"]))
    return out


class StoreTierReporter:
    """Reads every store worker's tier usage and pushes it as role ``store`` to the driver's exporter."""

    def __init__(self, run_dir: str, config: MonitorConfig, driver_node: str, workers: list[tuple[str, str]],
                 token: str | None) -> None:
        """``workers``: ``(Ray node id, address)`` in rank order (``StoreFleet.workers``)."""
        sink = str(node_socket_path(socket_dir(run_dir), driver_node))
        self.workers = list(workers)
        self.token = token
        self.every_s = config.prometheus.push_interval_s
        self._sink, self._config = sink, config
        self.metrics = [self._new_metrics(rank) for rank in range(len(self.workers))]
        self.retired: set[int] = set()
        """Ranks whose worker left the mesh (a migration): no longer read, their series gone."""
        self._clients: dict[str, Any] = {}
        self._next = 0.0
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}
        """(address, tier) -> the worker's (hits, misses) at the last reading: counters advance by the difference."""

    def _new_metrics(self, rank: int) -> RoleMetrics:
        config = self._config
        return RoleMetrics("store", rank, node_label(self.workers[rank][0]), sink=self._sink, sample_resources=False,
                           push_interval_s=config.prometheus.push_interval_s, leak=config.leak,
                           memory_budget_bytes=config.memory_budget_bytes.get("store"))

    def restarted(self, rank: int) -> None:
        """The worker of ``rank`` restarted in place: its series and leak detector start again."""
        self._drop(self.workers[rank][1])
        self.metrics[rank].close()
        self.metrics[rank] = self._new_metrics(rank)

    def report(self, force: bool = False) -> None:
        """One reading of every worker (at most every push interval); a worker that does not answer is skipped."""
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.every_s
        for rank, (metrics, (_, address)) in enumerate(zip(self.metrics, self.workers)):
            if rank in self.retired:
                continue
            try:
                stats = self._client(address).stats()
            except Exception as err:  # noqa: BLE001 - a restarting worker: no reading this time
                log.debug("monitor: store worker %s gave no stats (%s)", address, err)
                self._drop(address)
                continue
            for tier, (used, capacity) in tier_usage(stats).items():
                metrics.set_store_tier(tier, used, capacity)
            for tier, (hits, misses) in tier_lookups(stats.get("counters", {})).items():
                old_hits, old_misses = self._seen.get((address, tier), (0, 0))
                if hits < old_hits or misses < old_misses:  # the worker restarted: its counters began again
                    old_hits, old_misses = 0, 0
                metrics.inc_store_lookups(tier, hits=hits - old_hits, misses=misses - old_misses)
                self._seen[address, tier] = (hits, misses)
            memory = stats.get("process")
            if memory:
                metrics.observe_memory(ResourceReading(memory["rss_bytes"], memory["host_available_bytes"]))
            metrics.push()

    def memory_status(self) -> dict[int, list[MemoryStatus]]:
        """Per store rank still serving: its leak detector's verdicts after the last reading."""
        return {rank: m.memory_status for rank, m in enumerate(self.metrics) if rank not in self.retired}

    def objects(self, rank: int) -> int | None:
        """How many objects the worker of ``rank`` holds now (None: it does not answer)."""
        try:
            return int(self._client(self.workers[rank][1]).stats()["objects"])
        except Exception:  # noqa: BLE001 - the caller reports what it knows
            return None

    def retire(self, rank: int) -> None:
        """The worker of ``rank`` left the mesh: stop reading it; its series leave the exporter."""
        self.retired.add(rank)
        self._drop(self.workers[rank][1])
        self.metrics[rank].close()

    def _client(self, address: str) -> Any:
        client = self._clients.get(address)
        if client is None:
            from kilorl.store import StoreClient

            client = self._clients[address] = StoreClient(address, self.token, zero_copy=False)
        return client

    def _drop(self, address: str) -> None:
        client = self._clients.pop(address, None)
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def close(self) -> None:
        """The workers' series leave the exporter with the run."""
        for address in list(self._clients):
            self._drop(address)
        for rank, m in enumerate(self.metrics):
            if rank not in self.retired:
                m.close()
