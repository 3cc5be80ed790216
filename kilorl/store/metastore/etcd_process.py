"""Run a single-member etcd server on loopback (tests, benchmarks, local clusters).

Uses the Debian ``etcd`` binary (``scripts/services.sh`` installs it). The server
gets its own data directory and free loopback ports, and ``stop()`` kills it for
certain, so a failing test never leaves one behind.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    """A currently free loopback TCP port (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdProcess:
    """A throwaway etcd: ``with EtcdProcess() as etcd: open_metastore(etcd.url)``.

    Args:
        data_dir: where etcd keeps its state; a fresh temp dir (removed on stop) if None.
        binary: the etcd executable.
        start_timeout: seconds to wait for /health before giving up.
    """

    def __init__(self, data_dir: str | Path | None = None, binary: str = "etcd", start_timeout: float = 30.0):
        self.binary = shutil.which(binary) or binary
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kilorl-etcd-"))
        self.start_timeout = start_timeout
        self.client_port = 0
        self.peer_port = 0
        self._proc: subprocess.Popen | None = None
        self._member_dir: Path | None = None
        self._log_path = self.data_dir / "etcd.log"

    @property
    def url(self) -> str:
        """The metastore URL for ``open_metastore``."""
        return f"etcd://127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> EtcdProcess:
        if shutil.which(self.binary) is None:
            raise FileNotFoundError(
                f"etcd binary {self.binary!r} not found; install Debian 'etcd-server' (bash scripts/services.sh)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        restarting = self._member_dir is not None
        for attempt in range(1 if restarting else 3):  # a "free" port may be taken before etcd binds it
            if not restarting:
                self.client_port, self.peer_port = free_port(), free_port()
                self._member_dir = self.data_dir / f"member-data-{attempt}"
            client = f"http://127.0.0.1:{self.client_port}"
            peer = f"http://127.0.0.1:{self.peer_port}"
            member_dir = self._member_dir
            log = open(self._log_path, "ab")
            try:
                self._proc = subprocess.Popen(
                    [
                        self.binary,
                        "--name", "kilorl",
                        "--data-dir", str(member_dir),
                        "--listen-client-urls", client,
                        "--advertise-client-urls", client,
                        "--listen-peer-urls", peer,
                        "--initial-advertise-peer-urls", peer,
                        "--initial-cluster", f"kilorl={peer}",
                        "--initial-cluster-state", "new",
                        "--log-level", "warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                log.close()
            if self._wait_healthy():
                return self
            self._kill()
            if not restarting:
                self._member_dir = None
        tail = self._log_path.read_text(errors="replace")[-2000:] if self._log_path.exists() else ""
        raise RuntimeError(f"etcd did not become healthy within {self.start_timeout}s; log tail:\n{tail}")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=1.0)
                conn.request("GET", "/health")
                body = conn.getresponse().read()
                conn.close()
                if b'"true"' in body:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)

    def kill(self) -> None:
        """``kill -9`` the server but keep its ports and data: ``start()`` then restarts it."""
        self._kill()

    def stop(self) -> None:
        """Kill etcd and (if we created it) remove its data directory."""
        self._kill()
        self._member_dir = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
