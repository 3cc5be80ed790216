"""One data-system worker per Ray node, owned by a small Ray actor pinned to that node.

The actor starts ``kilorl store start --foreground`` as a child process and stops it when
the run ends. The child is tied to the actor's life (``PR_SET_PDEATHSIG``): if the actor
is killed (``ray.kill``, ``kill -9``, its raylet dying), the kernel kills the worker too,
so a run never leaves a store worker behind (docs/architecture.md, "Distributed engine").
On a machine where the run starts Ray itself, the driver starts its node's worker directly
(``WorkerProcess``) before Ray, so the worker comes up while Ray does.

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
                   join: str | None, cluster_name: str, l2_dir: str | None = None,
                   extra: list[str] | None = None) -> list[str]:
    """The ``kilorl store start`` command line of one node's worker (the first is ``--head``);
    ``extra``: further options (e.g. ``--inject-leak`` for a drill)."""
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--host", host,
           "--port", "0", "--run-dir", str(run_dir), "--token", token, "--shm-size", shm_size,
           "--keep-versions", str(keep_versions), "--cluster-name", cluster_name, "--log-level", "WARNING"]
    if l2_dir:
        cmd += ["--l2-dir", l2_dir]
    return cmd + (["--join", join] if join else ["--head"]) + list(extra or [])


def read_info(path: Path) -> dict[str, Any] | None:
    """A worker's info file (``pid``, ``host``, ``port``, ...), or None while not completely written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


INJECTED_FAULT_OPTIONS = ("--inject-leak", "--inject-leak-after")
"""``kilorl store start`` options of a fault drill, each followed by its value."""


def without_injected_faults(cmd: list[str]) -> list[str]:
    """``cmd`` without the fault-injection options and their values."""
    out: list[str] = []
    skip = False
    for arg in cmd:
        if skip:
            skip = False
        elif arg in INJECTED_FAULT_OPTIONS:
            skip = True
        else:
            out.append(arg)
    return out


class WorkerProcess:
    """A ``kilorl store start --foreground`` child, killed by the kernel when the thread that
    started it ends (start it from a thread that lives as long as the run).

    A worker that dies (kill -9, OOM) is restarted on the same port, so clients reconnect to
    the same address; its memory tiers start empty (durable objects come back from L2).
    """

    def __init__(self, host: str, token: str, shm_size: str, keep_versions: int, join: str | None,
                 cluster_name: str, l2_dir: str | None = None, start_timeout: float = 60.0,
                 extra: list[str] | None = None) -> None:
        self.host = host
        self.run_dir = Path(tempfile.mkdtemp(prefix="kilorl-store-"))
        if l2_dir:
            Path(l2_dir).mkdir(parents=True, exist_ok=True)
        self.cmd = worker_command(host, self.run_dir, token, shm_size, keep_versions, join, cluster_name, l2_dir,
                                  extra)
        self.log = open(self.run_dir / "worker.log", "ab")  # noqa: SIM115 - closed in stop()
        self.start_timeout = start_timeout
        self.port: int | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self.proc = self._spawn(self.cmd)

    @property
    def info_file(self) -> Path:
        """Written by the worker once it serves."""
        return self.run_dir / "worker.json"

    def _spawn(self, cmd: list[str]) -> subprocess.Popen:
        # Its own session: a Ctrl-C at the driver's terminal reaches the driver, which stops the
        # worker in order, not the worker directly (the kernel still kills it with its parent).
        return subprocess.Popen(cmd, stdout=self.log, stderr=self.log, preexec_fn=_die_with_parent,
                                start_new_session=True)

    def wait_ready(self) -> str:
        """Block until the worker serves (the first call starts the restart watchdog); its address."""
        if self.port is None:
            self.port = self._wait_ready(self.start_timeout)
            threading.Thread(target=self._watch, name="store-watchdog", daemon=True).start()
        return self.address()

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            if self.proc.poll() is None or self._stopping.is_set():
                continue
            self.restarts += 1
            self.proc = self._spawn([str(self.port) if prev == "--port" else a
                                     for prev, a in zip(["", *self.cmd], self.cmd)])
            try:
                self._wait_ready(self.start_timeout)
            except (RuntimeError, TimeoutError):
                continue  # try again on the next round

    def _wait_ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.run_dir / "worker.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"store worker exited with {self.proc.returncode}: {tail}")
            data = read_info(self.info_file)
            if data is not None and data.get("pid") == self.proc.pid:
                return int(data["port"])
            time.sleep(0.02)
        self.proc.kill()
        raise TimeoutError(f"store worker on {self.host} did not serve within {timeout:g}s")

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def pid(self) -> int:
        return self.proc.pid

    def restart_in_place(self, timeout: float = 60.0) -> int:
        """Ends the worker at once (SIGKILL: a leaking worker with no other member to hand its
        objects to) and has the watchdog start it again on its port, without injected faults
        (``--inject-leak``: the fault stays with the old process, as a role's does). Its memory
        tiers start empty; durable objects come back from L2. Returns the new process's pid once it serves."""
        if self.port is None:
            raise RuntimeError("the store worker has not served yet; nothing to restart")
        self.cmd = without_injected_faults(self.cmd)
        old = self.proc
        old.kill()
        old.wait(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.proc
            data = read_info(self.info_file) if proc is not old else None
            if data is not None and data.get("pid") == proc.pid:
                return proc.pid
            time.sleep(0.05)
        raise TimeoutError(f"the store worker on {self.host} did not serve again within {timeout:g}s")

    def retire(self, timeout: float = 60.0) -> int:
        """Graceful leave, for good: SIGTERM makes a cluster worker hand its records and held
        objects to the ring's other members before it exits; it is not restarted. Its exit code."""
        if not self._end(timeout):
            raise TimeoutError(f"store worker {self.address()} did not finish its hand-off within {timeout:g}s")
        return self.proc.returncode

    def stop(self, timeout: float = 10.0) -> None:
        self._end(timeout)
        self.log.close()

    def _end(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; no restart. False when it had to be killed."""
        self._stopping.set()
        if self.proc.poll() is not None:
            return True
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
            return False


class StoreNode:
    """A store worker on this Ray actor's node. ``where()`` once it serves; ``stop()`` ends it."""

    def __init__(self, token: str, shm_size: str, keep_versions: int, join: Any, cluster_name: str,
                 l2_dir: str | None = None, start_timeout: float = 60.0, extra: list[str] | None = None) -> None:
        """``join``: the head's address, the head's ``StoreNode`` handle (waited on here, so a
        fleet's actors can all be created at once), or None to be the head."""
        import ray

        if join is not None and not isinstance(join, str):
            join = ray.get(join.where.remote())[1]
        self.node_id = ray.get_runtime_context().get_node_id()
        self.worker = WorkerProcess(ray.util.get_node_ip_address(), token, shm_size, keep_versions, join,
                                    cluster_name, l2_dir, start_timeout, extra)
        self.worker.wait_ready()

    def restart_count(self) -> int:
        return self.worker.restarts

    def address(self) -> str:
        return self.worker.address()

    def where(self) -> tuple[str, str]:
        """``(ray node id, worker address)``."""
        return self.node_id, self.address()

    def pid(self) -> int:
        return self.worker.pid()

    def retire(self, timeout: float = 60.0) -> int:
        """The worker leaves the mesh for good, handing off its objects (``WorkerProcess.retire``)."""
        return self.worker.retire(timeout)

    def restart_in_place(self, timeout: float = 60.0) -> int:
        """The worker restarts on its port, empty, without injected faults (``WorkerProcess.restart_in_place``)."""
        return self.worker.restart_in_place(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self.worker.stop(timeout)


@dataclass
class NodeConnector:
    """Picklable client factory: the worker of the caller's Ray node (``default`` off Ray).

    ``addresses`` maps Ray node ids to worker addresses. A node without a worker (e.g. the
    driver's node of an external ``--store`` worker) uses ``default``. Workers still
    starting are resolved on first use, so a run creates its roles without waiting for its
    workers: ``nodes`` holds ``StoreNode`` handles (asked for their address), ``files`` the
    info files of workers the driver started on its own node (read once written).
    """

    addresses: dict[str, str]
    default: str
    token: str | None = None
    connected: list[str] = field(default_factory=list, compare=False)
    """Addresses this connector connected to in this process (tests check node-locality)."""
    nodes: dict[str, Any] = field(default_factory=dict, compare=False)
    """Ray node id -> ``StoreNode`` handle of a worker whose address is not recorded yet."""
    files: dict[str, str] = field(default_factory=dict, compare=False)
    """Ray node id -> info file of a worker the driver started on that (its own) node."""
    head: str = ""
    """Ray node id of the mesh head: its worker is the default of nodes without one."""
    timeout_s: float = 60.0
    """How long a role waits for its node's worker to serve."""

    def address_here(self) -> str:
        try:
            import ray

            if ray.is_initialized():
                return self.resolve(ray.get_runtime_context().get_node_id())
        except ImportError:
            pass
        return self.resolve(None)

    def resolve(self, node_id: str | None) -> str:
        """The address of ``node_id``'s worker (the head's, or ``default``, for a node without one)."""
        if node_id is not None and node_id in self.addresses:
            return self.addresses[node_id]
        if node_id is not None and (node_id in self.nodes or node_id in self.files):
            self.addresses[node_id] = self._ask(node_id)
            return self.addresses[node_id]
        if not self.default and self.head:
            self.default = self.resolve(self.head)
        return self.default

    def _ask(self, node_id: str) -> str:
        if node_id in self.nodes:
            import ray

            return ray.get(self.nodes[node_id].where.remote())[1]
        path, deadline = Path(self.files[node_id]), time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            data = read_info(path)
            if data is not None:
                return f"{data['host']}:{data['port']}"
            time.sleep(0.01)
        raise TimeoutError(f"the store worker of node {node_id[:12]} did not serve within {self.timeout_s:g}s ({path})")

    def __call__(self) -> Any:
        from kilorl.store import StoreClient

        address = self.address_here()
        self.connected.append(address)
        return StoreClient(address, token=self.token)


@dataclass
class PinnedConnector:
    """Picklable client factory of one node's worker, whichever node the caller runs on:
    the home of a parameter shard (``StoreParameterStore(shard_homes=...)``)."""

    connector: NodeConnector
    node_id: str
    """Ray node id of the worker (the head's worker serves a node without one)."""

    def __call__(self) -> Any:
        from kilorl.store import StoreClient

        address = self.connector.resolve(self.node_id)
        self.connector.connected.append(address)
        return StoreClient(address, token=self.connector.token)


def token_from_env() -> str | None:
    return os.environ.get("KILORL_STORE_TOKEN") or None
