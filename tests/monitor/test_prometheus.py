"""Against a real Prometheus: file-based discovery, every metric from every role, new exporters found live."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kilorl.monitor.dashboard import PANELS, resolve
from kilorl.monitor.discovery import TargetsFile, write_prometheus_config
from tests.monitor.conftest import (
    ExporterProc,
    Procs,
    Prometheus,
    poll_until_empty,
    start_exporter,
    start_prometheus,
    start_role,
    wait_for,
)
from tests.monitor.helpers import CPU_METRICS, sample_name

SCRAPE_S = 1.0
DISCOVERY_S = 5.0
"""Prometheus (2.x) forwards discovered targets to the scrape manager at most every 5 s (fixed in its code)."""

ROLES = {"n0": [("actor", 0), ("actor", 1), ("learner", 0)], "n1": [("actor", 2), ("store", 0)]}
ROLE_ARGS = ("--interval", "0.5", "--warmup-s", "0", "--window-s", "8")


@dataclass
class Monitored:
    prom: Prometheus
    targets: TargetsFile
    exporters: dict[str, ExporterProc]
    procs: Procs
    dir: Path


@pytest.fixture(scope="module")
def monitored():
    d = Path(tempfile.mkdtemp(prefix="kmon", dir="/tmp"))
    procs = Procs()
    prom = None
    try:
        exporters = {node: start_exporter(node, d) for node in ROLES}
        for exp in exporters.values():
            procs.add(exp.proc)
        for node, roles in ROLES.items():
            for role, rank in roles:
                procs.add(start_role(role, rank, node, exporters[node].socket, *ROLE_ARGS))
        targets = TargetsFile(d / "targets.json")
        for node, exp in exporters.items():
            targets.set(node, exp.address)
        config = write_prometheus_config(d / "prometheus.yml", targets.path, scrape_interval_s=SCRAPE_S)
        prom = start_prometheus(config, d)
        yield Monitored(prom, targets, exporters, procs, d)
    finally:
        if prom is not None:
            prom.stop()
        procs.stop_all()
        shutil.rmtree(d, ignore_errors=True)


def _identities(prom: Prometheus, promql: str) -> set[tuple[str, str, str]]:
    return {(r["metric"]["role"], r["metric"]["rank"], r["metric"]["node"]) for r in prom.query(promql)}


def _missing(prom: Prometheus) -> list[str]:
    want = {(role, str(rank), node) for node, roles in ROLES.items() for role, rank in roles}
    return [m.name for m in CPU_METRICS if not want <= _identities(prom, sample_name(m))]


def test_every_metric_has_samples_from_every_role_on_every_node(monitored):
    assert poll_until_empty(lambda: _missing(monitored.prom), 90) == []
    up = monitored.prom.query('up{job="kilorl"}')
    assert sorted(r["metric"]["exporter_node"] for r in up if r["value"][1] == "1") == sorted(ROLES)


def test_an_exporter_started_mid_run_is_scraped_without_restarting_prometheus(monitored):
    wait_for(lambda: monitored.prom.query('up{job="kilorl"} == 1'), 60, "the first scrapes")
    exp = start_exporter("n2", monitored.dir)
    monitored.procs.add(exp.proc)
    monitored.procs.add(start_role("actor", 3, "n2", exp.socket, *ROLE_ARGS))
    wait_for(lambda: "kilorl_role_up{" in exp.metrics_text(), 30, "the new role to reach its exporter")
    t0 = time.monotonic()
    monitored.targets.set("n2", exp.address)
    wait_for(lambda: _identities(monitored.prom, 'kilorl_role_up{node="n2"}'), 30, "the new exporter's series", interval=0.1)
    delay = time.monotonic() - t0
    print(f"new exporter scraped {delay:.2f} s after the targets file was rewritten")
    # Two scrape intervals after Prometheus hands the target to its scraper (its discovery tick is fixed at 5 s).
    assert delay <= DISCOVERY_S + 2 * SCRAPE_S + 1.0


def test_a_removed_exporter_goes_down_and_its_roles_leave(monitored):
    assert poll_until_empty(lambda: _missing(monitored.prom), 90) == []
    exp = monitored.exporters["n1"]
    monitored.targets.remove("n1")
    wait_for(lambda: not monitored.prom.query('up{exporter_node="n1"}'), 30, "n1 to leave the targets")
    # Its last samples go stale (Prometheus' staleness markers): the instant query no longer returns n1's roles.
    wait_for(lambda: not _identities(monitored.prom, 'kilorl_role_up{node="n1"}'), 30, "n1's series to go stale")
    monitored.targets.set("n1", exp.address)  # put it back for the remaining tests
    wait_for(lambda: _identities(monitored.prom, 'kilorl_role_up{node="n1"}'), 30, "n1 to return")


def _panels_without_data(prom: Prometheus) -> list[str]:
    gpu = Path("/dev/nvidiactl").exists()
    empty = []
    for p in PANELS:
        for expr, _ in p.queries:
            got = prom.query(resolve(expr, rate=f"{int(10 * SCRAPE_S)}s"))
            if p.gpu_only and not gpu:
                assert got == [], f"{p.title}: GPU series must be absent on a CPU machine, got {got}"
            elif not got:
                empty.append(f"{p.title}: {expr}")
    return empty


def test_every_dashboard_query_returns_data_from_prometheus(monitored):
    assert poll_until_empty(lambda: _missing(monitored.prom), 90) == []
    assert poll_until_empty(lambda: _panels_without_data(monitored.prom), 30) == []
