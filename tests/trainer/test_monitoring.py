"""A real training run, scraped by a real Prometheus through the run's own generated config.

The fast stand-in (fake role processes) is tests/monitor/test_prometheus.py; this one
runs ``Trainer.fit`` on CartPole with two actors and ``monitor.prometheus.enabled``,
starts ``/usr/bin/prometheus`` on ``RUN_DIR/monitor/prometheus.yml`` (file-based
discovery on the driver's targets file) and, while the run trains, queries the HTTP API.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from kilorl.monitor.dashboard import PANELS, resolve
from kilorl.monitor.metrics import METRICS
from kilorl.trainer import StartupError, Trainer
from tests.conftest import tiny_config
from tests.monitor.conftest import PROMTOOL, poll_until_empty, start_prometheus, wait_for
from tests.monitor.helpers import sample_name

SCRAPE_S = 1.0
ACTORS = [("actor", "0"), ("actor", "1")]
LEARNERS = [("learner", "0")]
EVERY_ROLE = ACTORS + LEARNERS
STORES = [("store", "0")]

# Which roles of a training run report each metric. Exceptions, explicitly:
# * store tier usage: the driver reads it from the run's store worker (role ``store``);
# * store hit/miss series: from the store worker's per-tier read counters, also through the driver (role ``store``);
# * migration events: recorded only when a migration happens, which a healthy run never has;
# * device and GPU series: absent on a CPU-only machine (checked absent below).
REPORTED_BY = {
    "kilorl_env_steps_total": ACTORS, "kilorl_episodes_total": ACTORS, "kilorl_env_steps_per_second": ACTORS,
    "kilorl_episode_return": ACTORS, "kilorl_policy_lag_versions": ACTORS,
    "kilorl_param_publish_latency_seconds": ACTORS, "kilorl_learner_update_seconds": LEARNERS,
    "kilorl_comm_bytes_total": EVERY_ROLE, "kilorl_process_resident_memory_bytes": EVERY_ROLE,
    "kilorl_memory_leak_slope_bytes_per_second": EVERY_ROLE, "kilorl_memory_leak_suspected": EVERY_ROLE,
    "kilorl_memory_time_to_limit_seconds": EVERY_ROLE, "kilorl_memory_limit_bytes": EVERY_ROLE,
    "kilorl_store_tier_used_bytes": STORES, "kilorl_store_tier_capacity_bytes": STORES,
    "kilorl_store_hits_total": STORES, "kilorl_store_misses_total": STORES,
}
NOT_IN_A_TRAINING_RUN = {"kilorl_migration_events_total"}
NO_DATA_PANELS = {"Migration events"}


def _config(total_env_steps: int):
    return tiny_config(
        parallelism={"actor": 2, "envs_per_actor": 4},
        train={"total_env_steps": total_env_steps, "seed": 2},
        monitor={"prometheus": {"enabled": True, "port": 0, "push_interval_s": 0.5, "scrape_interval_s": SCRAPE_S},
                 "leak": {"warmup_s": 0.0, "window_s": 6.0, "min_samples": 6}},
    )


def test_every_metric_is_classified_for_a_training_run():
    """A metric added to kilorl.monitor.metrics must say here who reports it in a run (or why nobody does)."""
    cpu = {m.name for m in METRICS if m.cpu_present}
    assert set(REPORTED_BY) | NOT_IN_A_TRAINING_RUN == cpu
    assert not set(REPORTED_BY) & NOT_IN_A_TRAINING_RUN


def _identities(prom, promql: str) -> set[tuple[str, str]]:
    return {(r["metric"]["role"], r["metric"]["rank"]) for r in prom.query(promql)}


def _missing(prom) -> list[str]:
    by_name = {m.name: m for m in METRICS}
    return [f"{name}: {sorted(set(roles) - _identities(prom, sample_name(by_name[name])))}"
            for name, roles in REPORTED_BY.items() if not set(roles) <= _identities(prom, sample_name(by_name[name]))]


def _panels_without_data(prom) -> list[str]:
    gpu = Path("/dev/nvidiactl").exists()
    empty = []
    for p in PANELS:
        for expr, _ in p.queries:
            got = prom.query(resolve(expr, rate=f"{int(10 * SCRAPE_S)}s"))
            if p.gpu_only and not gpu:
                assert got == [], f"{p.title}: GPU series must be absent on a CPU machine, got {got}"
            elif p.title not in NO_DATA_PANELS and not got:
                empty.append(f"{p.title}: {expr}")
    return empty


@pytest.mark.slow
def test_a_training_run_is_scraped_by_prometheus_from_its_own_config(ray_local, tmp_path, capsys):
    run = tmp_path / "run"
    trainer = Trainer(_config(60_000), run)
    outcome: dict[str, object] = {}

    def fit() -> None:
        try:
            outcome["result"] = trainer.fit()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = e

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    prom = None
    try:
        config = wait_for(lambda: (run / "monitor" / "prometheus.yml").is_file() and run / "monitor" / "prometheus.yml",
                          120, "the run to write its Prometheus config")
        prom = start_prometheus(config, tmp_path)
        assert poll_until_empty(lambda: _missing(prom), 60) == []
        assert poll_until_empty(lambda: _panels_without_data(prom), 20) == []
        targets = json.loads((run / "monitor" / "targets.json").read_text())
        address = targets[0]["targets"][0]
        exposition = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read()
        assert thread.is_alive(), "the run ended before every check was made: give it more env steps"
        if shutil.which(PROMTOOL) or Path(PROMTOOL).exists():
            check = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, timeout=30)
            assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    finally:
        if prom is not None:
            prom.stop()
        thread.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    banner = capsys.readouterr().out
    assert f"targets file {run / 'monitor' / 'targets.json'}" in banner and "/metrics" in banner
    # The session tore its exporters down: the targets file lists no node any more.
    assert json.loads((run / "monitor" / "targets.json").read_text()) == []


def test_monitoring_is_off_by_default_and_leaves_no_files(ray_local, tmp_path):
    cfg = tiny_config(train={"total_env_steps": 256, "seed": 1})
    assert cfg.monitor.prometheus.enabled is False
    Trainer(cfg, tmp_path / "run").fit()
    assert not (tmp_path / "run" / "monitor").exists()


@pytest.mark.slow
def test_kilorl_top_shows_every_role_of_a_running_training(ray_local, tmp_path):
    from kilorl.monitor.top import collect, render

    run = tmp_path / "run"
    trainer = Trainer(_config(40_000), run)
    thread = threading.Thread(target=trainer.fit, daemon=True)
    thread.start()
    try:
        def all_roles() -> object:
            rows, errors = collect(run)
            have = {(r.role, r.rank) for r in rows if r.rss_bytes is not None}
            stepping = {(r.role, r.rank) for r in rows if r.env_steps}
            return (rows, errors) if set(EVERY_ROLE) <= have and set(ACTORS) <= stepping else None

        rows, errors = wait_for(all_roles, 180, "every role in kilorl top")
        assert errors == []
        table = render(rows, errors)
        assert len(table.splitlines()) == 1 + len(EVERY_ROLE) + len(STORES)  # the store worker has its line
        actor0 = next(r for r in rows if (r.role, r.rank) == ("actor", "0"))
        assert actor0.env_steps > 0 and actor0.rss_bytes > 10 * 2**20
    finally:
        thread.join(timeout=300)
    assert not thread.is_alive()
    assert collect(run) == ([], [])  # the run's session closed: nothing left to scrape



def _listening_ports() -> set[int]:
    import psutil

    return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def test_a_failed_start_up_stops_the_exporter_and_empties_the_targets_file(ray_local, tmp_path):
    from kilorl.monitor.runtime import socket_dir

    run = tmp_path / "run"
    cfg = _config(256).model_copy(update={"env": tiny_config(env={"id": "tests.trainer.broken_env:ResetRaises"}).env})
    before = _listening_ports()
    with pytest.raises(StartupError, match="refuses to reset"):
        Trainer(cfg, run).fit()
    assert json.loads((run / "monitor" / "targets.json").read_text()) == []  # it was written, then emptied
    assert _listening_ports() - before == set()  # the driver's exporter no longer serves HTTP
    assert list(socket_dir(run).glob("*.sock")) == []  # nor takes snapshots


@pytest.mark.slow
def test_a_node_that_joins_mid_run_gets_an_exporter_and_one_that_leaves_is_dropped_from_the_targets():
    import os
    import sys

    from tests.conftest import REPO

    out = subprocess.run([sys.executable, "-m", "tests.trainer.monitor_nodes_check"], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env={**os.environ, "RAY_ADDRESS": ""})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["at_start"] == [r["driver_node"]]
    assert r["after_join"] == sorted([r["driver_node"], r["joined"]])
    assert r["pushed"]  # a role on the joined node reaches that node's exporter
    assert r["exposition"] == [f'kilorl_env_steps_total{{node="{r["joined"]}",rank="7",role="actor"}} 5.0']
    assert r["after_leave"] == [r["driver_node"]]
