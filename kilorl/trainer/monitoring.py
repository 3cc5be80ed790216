"""The driver's part of monitoring: one exporter per node, the targets file, the banner.

``SessionMonitor.start()`` runs inside the role session's start-up (docs/monitor.md,
"Wiring"): the driver's node gets its exporter in the driver process
(:class:`~kilorl.monitor.runtime.DriverMonitor`, which also keeps
``RUN_DIR/monitor/targets.json`` and writes ``prometheus.yml``); every other alive Ray
node gets a :class:`NodeExporterActor` pinned to it (hard node affinity, no CPU), whose
address goes into the targets file. Everything started is recorded as it starts, so
:meth:`SessionMonitor.close` after a failure at any point ends exactly what exists.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kilorl.monitor.runtime import DriverMonitor, socket_dir, start_node_exporter
from kilorl.monitor.settings import MonitorConfig, PrometheusConfig
from kilorl.roles.monitoring import MonitorSpec, current_node, node_label


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

    @property
    def spec(self) -> MonitorSpec:
        return MonitorSpec(self.run_dir, self.config)

    def start(self) -> SessionMonitor:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = current_node()
        self.driver = DriverMonitor(self.run_dir, self.config, here)
        remote = ray.remote(num_cpus=0, max_restarts=0)(NodeExporterActor)
        pending = {}
        for n in ray.nodes():
            node = node_label(n["NodeID"])
            if not n.get("Alive") or node == here:
                continue
            strategy = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            self.node_actors[node] = remote.options(scheduling_strategy=strategy).remote(
                self.run_dir, node, self.config.prometheus)
            pending[node] = self.node_actors[node].address.remote()
        for node, ref in pending.items():
            self.driver.add_node(node, ray.get(ref, timeout=60))
        return self

    def describe(self) -> str:
        """The start-of-run banner: where to scrape, the targets file, the Prometheus command."""
        assert self.driver is not None
        others = f"; {len(self.node_actors)} more node exporter(s) listed there" if self.node_actors else ""
        return self.driver.describe() + others

    def close(self) -> None:
        """Stop every node's exporter (Ray actors first), then the driver's; the targets file is emptied."""
        import ray

        actors, self.node_actors = list(self.node_actors.values()), {}
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
