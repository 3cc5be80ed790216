"""Helpers shared by the store tests: real worker processes and polling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TOKEN = "test-token-123"

START_TIMEOUT_S = float(os.environ.get("KILORL_TEST_START_TIMEOUT_S", "180"))
"""How long a worker process may take to start. A deadline, not a window: a started worker is
seen at once and one that exits fails at once; only a hung start waits it out. Python's imports
alone took over 30 s at load average 30 on the 2-core VM."""


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Polls ``predicate`` until it returns a truthy value or the deadline passes. ``timeout``
    is for CI's idle two cores; it grows with the load per core when the wait begins (as the
    suite's hang guards do, tests/conftest.py), so a busy machine does not fail a wait that
    would have succeeded."""
    try:
        timeout *= max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class WorkerProcess:
    """A worker started with ``kilorl store start --foreground`` in its own process."""

    def __init__(self, base: Path, *args: str, token: str | None = TOKEN, name: str = "w"):
        self.base = base
        self.args = list(args)
        self.token = token
        self.run_dir = base / f"run-{name}"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = START_TIMEOUT_S) -> WorkerProcess:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        info = self.run_dir / "worker.json"
        if info.exists():
            info.unlink()
        cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
               "--run-dir", str(self.run_dir), *self.args]
        if self.token:
            cmd += ["--token", self.token]
        self.log = open(self.base / f"{self.run_dir.name}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}: {self.read_log()[-3000:]}")
            if info.exists():
                data = json.loads(info.read_text())
                return data if data["pid"] == self.proc.pid else None
            return None

        try:
            self.info = wait_until(ready, timeout, what="worker start")
        except AssertionError:  # a start that failed leaves no process behind
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            raise
        self.port = self.info["port"]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **kw):
        from kilorl.store import StoreClient

        kw.setdefault("token", self.token)
        return StoreClient(self.address, **kw)

    def read_log(self) -> str:
        return (self.base / f"{self.run_dir.name}.log").read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.remove_arena()

    def remove_arena(self) -> None:
        """A killed worker cannot unlink its shared-memory file; do it for it."""
        arena = getattr(self, "info", {}).get("arena")
        if arena and os.path.exists(arena):
            os.unlink(arena)

    def stop(self, timeout: float = 60.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode if self.proc else 0


def run_python(code: str, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess:
    """Runs a snippet in a fresh interpreter (another process on the same node)."""
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full_env)
