"""Run in a fresh process by test_monitoring: a node that joins mid-run gets an exporter, one that leaves goes.

A ``ray.cluster_utils.Cluster`` with the driver's node only; the run's ``SessionMonitor`` is
started, a second raylet joins, a role on it reports, then the raylet is removed. Prints
one JSON line: the targets file's nodes at each step and the joined exporter's exposition.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kilorl.monitor.settings import MonitorConfig
from kilorl.roles.monitoring import node_label
from kilorl.trainer.monitoring import SessionMonitor
from kilorl.trainer.ray_start import start_local_cluster


def _targets(run_dir: Path) -> dict[str, str]:
    groups = json.loads((run_dir / "monitor" / "targets.json").read_text())
    return {g["labels"]["exporter_node"]: g["targets"][0] for g in groups}


def _refresh_until(monitor: SessionMonitor, run_dir: Path, pred, timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        monitor.refresh(force=True)
        if pred(_targets(run_dir)):
            return _targets(run_dir)
        time.sleep(0.2)
    raise TimeoutError(f"targets file never matched: {_targets(run_dir)}")


def _exposition_until(address: str, pred, timeout: float = 30.0) -> list[str]:
    """The exporter's ``kilorl_env_steps_total`` samples, scraped until ``pred`` holds (or the last seen)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
            lines = [line for line in resp.read().decode().splitlines() if "kilorl_env_steps_total{" in line]
        if pred(lines) or time.monotonic() >= deadline:
            return lines
        time.sleep(0.1)


class ReportingRole:
    """A role process on the joined node: reports through its node's exporter."""

    def __init__(self, run_dir: str, config: MonitorConfig) -> None:
        from kilorl.monitor.runtime import role_metrics
        from kilorl.roles.monitoring import current_node

        self.metrics = role_metrics(run_dir, "actor", 7, current_node(), config)
        self.metrics.inc_env_steps(5)

    def pushed(self) -> bool:
        return self.metrics.push()


def main(run_dir: Path) -> None:
    cluster = start_local_cluster({"num_cpus": 1, "object_store_memory": 80 << 20})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    config = MonitorConfig(prometheus={"enabled": True, "port": 0, "push_interval_s": 0.25})
    monitor = SessionMonitor(run_dir, config).start()
    out: dict = {"at_start": sorted(_targets(run_dir)), "driver_node": monitor.here}
    try:
        joined = cluster.add_node(num_cpus=1, object_store_memory=80 << 20)
        cluster.wait_for_nodes()
        new = node_label(joined.node_id)
        out["joined"] = new
        t0 = time.monotonic()
        targets = _refresh_until(monitor, run_dir, lambda t: new in t)
        out["listed_after_s"] = time.monotonic() - t0
        out["after_join"] = sorted(targets)
        role = ray.remote(num_cpus=0)(ReportingRole).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(joined.node_id, soft=False)).remote(
            str(Path(run_dir).resolve()), config)
        out["pushed"] = ray.get(role.pushed.remote(), timeout=60)
        # the push is a frame in the exporter's socket: it serves the sample once it has read it
        out["exposition"] = _exposition_until(targets[new], lambda lines: lines != [])
        ray.kill(role)
        cluster.remove_node(joined)
        out["after_leave"] = sorted(_refresh_until(monitor, run_dir, lambda t: new not in t))
    finally:
        monitor.close()
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "run")
