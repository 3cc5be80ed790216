"""The driver's part of monitoring: one exporter per node, the targets file, the banner.

``SessionMonitor.start()`` runs inside the role session's start-up (docs/monitor.md,
"Wiring"): the driver's node gets its exporter in the driver process
(:class:`~kilorl.monitor.runtime.DriverMonitor`, which also keeps
``RUN_DIR/monitor/targets.json`` and writes ``prometheus.yml``); every other alive Ray
node gets a :class:`NodeExporterActor` pinned to it (hard node affinity, no CPU), whose
address goes into the targets file. Everything started is recorded as it starts, so
:meth:`SessionMonitor.close` after a failure at any point ends exactly what exists.
During the run :meth:`SessionMonitor.refresh` follows the cluster: a node that joins gets
its exporter (and a line in the targets file) without waiting for it; a node that
leaves is taken out of the targets file.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kilorl.monitor.runtime import DriverMonitor, socket_dir, start_node_exporter
from kilorl.monitor.settings import MonitorConfig, PrometheusConfig
from kilorl.roles.monitoring import MonitorSpec, current_node, node_label

if TYPE_CHECKING:
    from kilorl.trainer.store_metrics import StoreTierReporter

REFRESH_EVERY_S = 2.0
"""How often, at most, the driver looks for nodes that joined or left the cluster."""


class NodeExporterActor:
    """A node's exporter, living in a zero-CPU Ray actor pinned to that node."""

    def __init__(self, run_dir: str, node: str, config: PrometheusConfig) -> None:
        self.exporter = start_node_exporter(run_dir, node, config)

    def address(self) -> str:
        return self.exporter.address

    def stop(self) -> None:
        self.exporter.stop()


class SessionMonitor:
    """Exporters on every node of the run and the discovery files; ``spec`` goes to every role."""

    def __init__(self, run_dir: str | Path, config: MonitorConfig) -> None:
        self.run_dir, self.config = str(Path(run_dir).resolve()), config
        self.driver: DriverMonitor | None = None
        self.node_actors: dict[str, Any] = {}
        self.here = ""
        self._pending: dict[str, Any] = {}
        """node -> address ref of an exporter started mid-run and not yet listed."""
        self._next_refresh = 0.0
        self.store: StoreTierReporter | None = None
        """The store workers' tier usage, once :meth:`watch_store` named them."""

    @property
    def spec(self) -> MonitorSpec:
        return MonitorSpec(self.run_dir, self.config)

    def start(self) -> SessionMonitor:
        import ray

        self.here = current_node()
        self.driver = DriverMonitor(self.run_dir, self.config, self.here)
        pending = {node: self._start_exporter(node_id) for node, node_id in self._alive_others().items()}
        for node, ref in pending.items():
            self.driver.add_node(node, ray.get(ref, timeout=60))
        self._next_refresh = time.monotonic() + REFRESH_EVERY_S
        return self

    def _alive_others(self) -> dict[str, str]:
        """node label -> Ray node id of every alive node but the driver's."""
        import ray

        return {node_label(n["NodeID"]): n["NodeID"] for n in ray.nodes()
                if n.get("Alive") and node_label(n["NodeID"]) != self.here}

    def _start_exporter(self, node_id: str) -> Any:
        """A pinned exporter actor on ``node_id``; returns the ref of its address."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(num_cpus=0, max_restarts=0)(NodeExporterActor)
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        node = node_label(node_id)
        self.node_actors[node] = remote.options(scheduling_strategy=strategy).remote(
            self.run_dir, node, self.config.prometheus)
        return self.node_actors[node].address.remote()

    def watch_store(self, workers: list[tuple[str, str]], token: str | None) -> None:
        """Report the tier usage and memory of these store workers (``(Ray node id, address)``
        in rank order) from now on."""
        from kilorl.trainer.store_metrics import StoreTierReporter

        if workers and self.driver is not None:
            self.store = StoreTierReporter(self.run_dir, self.config, self.here, workers, token)
            self.store.report(force=True)

    def refresh(self, force: bool = False) -> None:
        """Follow the cluster (at most every ``REFRESH_EVERY_S``): exporters for new nodes, none for gone ones.

        Never waits: a new node's exporter is listed in the targets file once its address is in.
        Also reads the store workers' tier usage (:meth:`watch_store`).
        """
        import ray

        if self.store is not None:
            self.store.report(force)
        now = time.monotonic()
        if self.driver is None or (not force and now < self._next_refresh):
            return
        self._next_refresh = now + REFRESH_EVERY_S
        alive = self._alive_others()
        for node, node_id in alive.items():
            if node not in self.node_actors:
                self._pending[node] = self._start_exporter(node_id)
        for node in [n for n in self.node_actors if n not in alive]:
            handle = self.node_actors.pop(node)
            self._pending.pop(node, None)
            self.driver.remove_node(node)
            with contextlib.suppress(Exception):  # the node is gone; so is its exporter
                ray.kill(handle)
        if self._pending:
            refs = {ref: node for node, ref in self._pending.items()}
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in done:
                node = refs[ref]
                del self._pending[node]
                try:
                    self.driver.add_node(node, ray.get(ref))
                except ray.exceptions.RayError:  # it could not start there: try again next refresh
                    self.node_actors.pop(node, None)

    def describe(self) -> str:
        """The start-of-run banner: where to scrape, the targets file, the Prometheus command."""
        assert self.driver is not None
        others = f"; {len(self.node_actors)} more node exporter(s) listed there" if self.node_actors else ""
        return self.driver.describe() + others

    def close(self) -> None:
        """Stop every node's exporter (Ray actors first), then the driver's; the targets file is emptied."""
        import ray

        if self.store is not None:
            self.store.close()
            self.store = None
        actors, self.node_actors, self._pending = list(self.node_actors.values()), {}, {}
        if ray.is_initialized():
            for handle in actors:
                try:
                    ray.kill(handle)
                except Exception:  # noqa: BLE001 - already gone is the goal
                    pass
        if self.driver is not None:
            self.driver.close()
            self.driver = None
            with contextlib.suppress(OSError):  # the per-run socket directory, once every socket is gone
                socket_dir(self.run_dir).rmdir()


def start_monitoring(run_dir: str | Path | None, config: MonitorConfig) -> SessionMonitor:
    """The run's monitor (not started yet: the caller records it first, so a failed start is torn down)."""
    if run_dir is None:
        raise ValueError("monitor.prometheus.enabled needs a run directory for the targets file")
    return SessionMonitor(run_dir, config)
