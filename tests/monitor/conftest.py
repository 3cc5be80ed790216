"""Real processes for the monitor tests: node exporters, role processes, a Prometheus server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def wait_for(pred: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    """Poll ``pred`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            out = pred()
            if out:
                return out
        except Exception as e:  # a server still starting up
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_exc!r})")


def poll_until_empty(get: Callable[[], list], timeout: float, interval: float = 0.5) -> list:
    """Poll ``get`` until it returns an empty list or the deadline passes; returns the last value (assert it is [])."""
    deadline = time.monotonic() + timeout
    while True:
        out = get()
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # in case a test stopped it
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def short_dir():
    """A short temporary directory (AF_UNIX socket paths are limited to ~104 bytes)."""
    d = tempfile.mkdtemp(prefix="kmon", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@dataclass
class ExporterProc:
    node: str
    address: str
    socket: str
    proc: subprocess.Popen

    def metrics_text(self) -> str:
        return urllib.request.urlopen(f"http://{self.address}/metrics", timeout=5).read().decode()


def start_exporter(node: str, sock_dir: Path, stale_after_s: float = 10.0) -> ExporterProc:
    """``python -m kilorl.monitor.exporter`` for ``node``; returns once it listens."""
    sock = str(sock_dir / f"{node}.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kilorl.monitor.exporter", "--node", node, "--socket", sock,
         "--stale-after-s", str(stale_after_s)],
        stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO,
    )
    line = proc.stdout.readline()  # the exporter prints one JSON line once it listens
    if not line:
        raise AssertionError(f"exporter for {node} exited with {proc.wait()} before it was ready")
    info = json.loads(line)
    return ExporterProc(node, info["address"], info["socket"], proc)


def start_role(role: str, rank: int, node: str, sink: str, *extra: str) -> subprocess.Popen:
    """``tests.monitor.role_proc``: a real process reporting every metric to ``sink``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.monitor.role_proc", "--role", role, "--rank", str(rank), "--node", node,
         "--sink", sink, *extra],
        env=_env(), cwd=REPO,
    )


class Procs:
    """Processes a fixture started, stopped in reverse order at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def add(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            _stop(p)


@pytest.fixture
def spawn_exporter(short_dir):
    """Start a node exporter process; stopped at teardown."""
    procs = Procs()

    def spawn(node: str, stale_after_s: float = 10.0) -> ExporterProc:
        exp = start_exporter(node, short_dir, stale_after_s)
        procs.add(exp.proc)
        return exp

    yield spawn
    procs.stop_all()


@pytest.fixture
def spawn_role():
    """Start a role process with the given arguments; stopped at teardown."""
    procs = Procs()

    def spawn(role: str, rank: int, node: str, sink: str, *extra: str) -> subprocess.Popen:
        return procs.add(start_role(role, rank, node, sink, *extra))

    yield spawn
    procs.stop_all()


class Prometheus:
    """A real Prometheus server on a loopback port, queried through its HTTP API."""

    def __init__(self, config: Path, storage: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(storage.parent / "prometheus.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={storage}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_for(self._ready, 60, "Prometheus to be ready", interval=0.2)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}")
        return urllib.request.urlopen(self.url + "/-/ready", timeout=2).status == 200

    def query(self, promql: str) -> list[dict]:
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = json.load(urllib.request.urlopen(url, timeout=10))
        if body.get("status") != "success":
            raise AssertionError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


def start_prometheus(config: Path, workdir: Path) -> Prometheus:
    """A Prometheus server with its storage under ``workdir``; skips the test if it is not installed."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (scripts/services.sh installs it)")
    storage = workdir / "tsdb"
    storage.mkdir()
    return Prometheus(config, storage, free_port())
