"""One data-system worker per Ray node, owned by a small Ray actor pinned to that node.

The actor starts ``kilorl store start --foreground`` as a child process and stops it when
the run ends. The child is tied to the actor's life (``PR_SET_PDEATHSIG``): if the actor
is killed (``ray.kill``, ``kill -9``, its raylet dying), the kernel kills the worker too,
so a run never leaves a store worker behind (docs/architecture.md, "Distributed engine").

``NodeConnector`` is what roles get instead of an address: called inside a role's process
it connects to the worker of the role's own node, so parameter reads are node-local
(zero-copy through the worker's shared-memory arena).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the actor's explicit stop() is the only cleanup


def worker_command(host: str, run_dir: Path, token: str, shm_size: str, keep_versions: int,
                   join: str | None, cluster_name: str, l2_dir: str | None = None) -> list[str]:
    """The ``kilorl store start`` command line of one node's worker (the first is ``--head``)."""
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--host", host,
           "--port", "0", "--run-dir", str(run_dir), "--token", token, "--shm-size", shm_size,
           "--keep-versions", str(keep_versions), "--cluster-name", cluster_name, "--log-level", "WARNING"]
    if l2_dir:
        cmd += ["--l2-dir", l2_dir]
    return cmd + (["--join", join] if join else ["--head"])


class StoreNode:
    """A store worker on this actor's node. ``address()`` once it serves; ``stop()`` ends it."""

    def __init__(self, token: str, shm_size: str, keep_versions: int, join: str | None, cluster_name: str,
                 l2_dir: str | None = None, start_timeout: float = 60.0) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self.host = ray.util.get_node_ip_address()
        self.run_dir = Path(tempfile.mkdtemp(prefix="kilorl-store-"))
        if l2_dir:
            Path(l2_dir).mkdir(parents=True, exist_ok=True)
        self.cmd = worker_command(self.host, self.run_dir, token, shm_size, keep_versions, join, cluster_name, l2_dir)
        self.log = open(self.run_dir / "worker.log", "ab")  # noqa: SIM115 - closed in stop()
        self.start_timeout = start_timeout
        self.proc = self._spawn(self.cmd)
        self.port = self._wait_ready(start_timeout)
        self.restarts = 0
        self._stopping = threading.Event()
        threading.Thread(target=self._watch, name="store-watchdog", daemon=True).start()

    def _spawn(self, cmd: list[str]) -> subprocess.Popen:
        return subprocess.Popen(cmd, stdout=self.log, stderr=self.log, preexec_fn=_die_with_parent)

    def _watch(self) -> None:
        """Restart a worker that died (kill -9, OOM) on the same port, so clients reconnect to
        the same address; its memory tiers start empty (durable objects come back from L2)."""
        cmd = [str(self.port) if prev == "--port" else a for prev, a in zip(["", *self.cmd], self.cmd)]
        while not self._stopping.wait(0.2):
            if self.proc.poll() is None or self._stopping.is_set():
                continue
            self.restarts += 1
            self.proc = self._spawn(cmd)
            try:
                self._wait_ready(self.start_timeout)
            except (RuntimeError, TimeoutError):
                continue  # try again on the next round

    def restart_count(self) -> int:
        return self.restarts

    def _wait_ready(self, timeout: float) -> int:
        info = self.run_dir / "worker.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.run_dir / "worker.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"store worker exited with {self.proc.returncode}: {tail}")
            if info.exists():
                data = json.loads(info.read_text())
                if data.get("pid") == self.proc.pid:
                    return int(data["port"])
            time.sleep(0.02)
        self.proc.kill()
        raise TimeoutError(f"store worker on {self.host} did not serve within {timeout:g}s")

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def where(self) -> tuple[str, str]:
        """``(ray node id, worker address)``."""
        return self.node_id, self.address()

    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.log.close()


@dataclass
class NodeConnector:
    """Picklable client factory: the worker of the caller's Ray node (``default`` off Ray).

    ``addresses`` maps Ray node ids to worker addresses. A node without a worker (e.g. the
    driver's node of an external ``--store`` worker) uses ``default``.
    """

    addresses: dict[str, str]
    default: str
    token: str | None = None
    connected: list[str] = field(default_factory=list, compare=False)
    """Addresses this connector connected to in this process (tests check node-locality)."""

    def address_here(self) -> str:
        try:
            import ray

            if ray.is_initialized():
                return self.addresses.get(ray.get_runtime_context().get_node_id(), self.default)
        except ImportError:
            pass
        return self.default

    def __call__(self) -> Any:
        from kilorl.store import StoreClient

        address = self.address_here()
        self.connected.append(address)
        return StoreClient(address, token=self.token)

    def every_node(self) -> list[Any]:
        """One client factory per distinct worker (writers publish to each node's worker)."""
        return [_Fixed(a, self.token) for a in dict.fromkeys([self.default, *self.addresses.values()])]


@dataclass(frozen=True)
class _Fixed:
    address: str
    token: str | None

    def __call__(self) -> Any:
        from kilorl.store import StoreClient

        return StoreClient(self.address, token=self.token)


def token_from_env() -> str | None:
    return os.environ.get("KILORL_STORE_TOKEN") or None
