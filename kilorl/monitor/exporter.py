"""One Prometheus exporter per node, serving every role of that node at one address.

Transport (why snapshots over a local socket). Each role keeps its metrics in a private
prometheus_client registry and sends a snapshot of it to its node's exporter over a
Unix domain socket once per ``push_interval_s``; the exporter serves the union. The
alternative, prometheus_client's multiprocess mode (one mmap file per process in a
per-node directory), was rejected:

* it needs ``PROMETHEUS_MULTIPROC_DIR`` in the environment before prometheus_client
  is imported, which Ray workers (pre-started, pooled) do not guarantee;
* a dead process's counters and histograms stay in its files forever, and its gauges
  only go away if someone calls ``mark_process_dead(pid)``;
* its increments are not cheaper: a multiprocess-mode counter increment took 1.1 us
  against 0.63 us for ``RoleMetrics.inc_env_steps`` (0.44 us for a bare in-process
  counter), and a push costs ~0.7 ms once a second (``benchmarks/monitor_bench.py``;
  numbers in docs/benchmarks.md, "Monitor").

With a socket, liveness is free: when a role dies its connection closes and the
exporter drops its series at once; a role that hangs (connection open, no snapshots)
is dropped after ``stale_after_s``. ``kilorl_role_up`` marks who is reporting and
``kilorl_exporter_roles_departed_total`` counts who left. The exporter stamps every
sample with the sender's identity labels (role, rank, node), so one role cannot
overwrite another's series, and a malformed frame closes only that connection.

The exporter binds 127.0.0.1 unless told otherwise. Run it in-process
(:class:`NodeExporter`) or as ``python -m kilorl.monitor.exporter``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socketserver
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from kilorl.monitor.wire import Snapshot, WireError, decode_snapshot, read_frame

log = logging.getLogger(__name__)

MAX_UNIX_PATH = 104
"""Shortest AF_UNIX path limit among the platforms we run on (macOS: 104, Linux: 108)."""


@dataclass
class _Source:
    conn: int
    snapshot: Snapshot
    last_seen: float = field(default_factory=time.monotonic)


class _Handler(socketserver.BaseRequestHandler):
    server: _IngestServer

    def handle(self) -> None:
        exporter, conn = self.server.exporter, id(self.request)
        try:
            while True:
                body = read_frame(self.request)
                if body is None:
                    return
                exporter._receive(conn, decode_snapshot(body))
        except WireError as e:
            log.warning("monitor exporter: closing a connection after a malformed frame: %s", e)
        except OSError:
            pass
        finally:
            exporter._depart(conn)


class _IngestServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    exporter: NodeExporter


class NodeExporter:
    """Receives role snapshots on ``socket_path``; serves them merged on ``http://host:port/metrics``."""

    def __init__(
        self, node: str, socket_path: str | os.PathLike, *, host: str = "127.0.0.1", port: int = 0, stale_after_s: float = 10.0
    ) -> None:
        self.node, self.host, self._port = node, host, port
        self.socket_path = str(socket_path)
        if len(self.socket_path.encode()) > MAX_UNIX_PATH:
            raise ValueError(f"NodeExporter: 'socket_path' is longer than {MAX_UNIX_PATH} bytes: {self.socket_path!r}")
        self.stale_after_s = stale_after_s
        self._lock = threading.Lock()
        self._sources: dict[tuple[str, str, str], _Source] = {}
        self._departed = 0
        self._ingest: _IngestServer | None = None
        self._http = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> NodeExporter:
        path = Path(self.socket_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # left by a dead exporter; a live one would be reachable on it
            path.unlink()
        self._ingest = _IngestServer(self.socket_path, _Handler)
        self._ingest.exporter = self
        os.chmod(self.socket_path, 0o600)
        threading.Thread(target=self._ingest.serve_forever, name="kilorl-exporter-ingest", daemon=True).start()
        self._http, _ = start_http_server(self._port, addr=self.host, registry=self.registry)
        return self

    @property
    def port(self) -> int:
        if self._http is None:
            raise RuntimeError("NodeExporter.port: the exporter is not started")
        return int(self._http.server_port)

    @property
    def address(self) -> str:
        """``host:port`` to scrape."""
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._ingest is not None:
            self._ingest.shutdown()
            self._ingest.server_close()
            self._ingest = None
            Path(self.socket_path).unlink(missing_ok=True)

    def __enter__(self) -> NodeExporter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- state ----------------------------------------------------------------------------------------
    def _receive(self, conn: int, snap: Snapshot) -> None:
        """The newest snapshot of an identity wins: a process that restarted under it replaces
        the old one, and a late snapshot the old one sent earlier (read after the new one's,
        from another connection) does not take its place back."""
        with self._lock:
            held = self._sources.get(snap.identity)
            if held is not None and held.conn != conn and held.snapshot.time > snap.time:
                return
            self._sources[snap.identity] = _Source(conn, snap)

    def _depart(self, conn: int) -> None:
        with self._lock:
            gone = [k for k, s in self._sources.items() if s.conn == conn]
            for k in gone:
                del self._sources[k]
            self._departed += len(gone)

    def _drop_stale(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [k for k, s in self._sources.items() if now - s.last_seen > self.stale_after_s]
            for k in stale:
                del self._sources[k]
            self._departed += len(stale)

    def roles(self) -> list[tuple[str, str, str]]:
        """Identities (role, rank, node) currently reporting."""
        self._drop_stale()
        with self._lock:
            return sorted(self._sources)

    def exposition(self) -> bytes:
        """The text the HTTP endpoint serves (for promtool and tests)."""
        return generate_latest(self.registry)

    # -- prometheus_client Collector protocol --------------------------------------------------------------
    def collect(self):
        self._drop_stale()
        with self._lock:
            sources = list(self._sources.values())
            departed = self._departed
        merged: dict[str, Metric] = {}
        for src in sources:
            ident = dict(zip(("role", "rank", "node"), src.snapshot.identity))
            for fam in src.snapshot.families:
                m = merged.get(fam.name)
                if m is None:
                    m = merged[fam.name] = Metric(fam.name, fam.help, fam.type)
                elif m.type != fam.type:
                    log.warning("monitor exporter: %s reports %s as %s, others as %s; ignored", ident, fam.name, fam.type, m.type)
                    continue
                for name, labels, value in fam.samples:
                    m.add_sample(name, {**labels, **ident}, value)
        yield from merged.values()
        now = time.monotonic()
        up = GaugeMetricFamily("kilorl_role_up", "1 for every role currently reporting to this node's exporter.",
                               labels=["role", "rank", "node"])
        age = GaugeMetricFamily("kilorl_role_last_report_age_seconds", "Seconds since the role's last snapshot arrived.",
                                labels=["role", "rank", "node"])
        for src in sources:
            up.add_metric(list(src.snapshot.identity), 1.0)
            age.add_metric(list(src.snapshot.identity), now - src.last_seen)
        yield up
        yield age
        departed_m = Metric("kilorl_exporter_roles_departed", "Role processes whose series this exporter dropped.", "counter")
        departed_m.add_sample("kilorl_exporter_roles_departed_total", {"node": self.node}, float(departed))
        yield departed_m


def main(argv: list[str] | None = None) -> None:
    """Run a node exporter until SIGTERM/SIGINT; prints one JSON line with its address when ready."""
    p = argparse.ArgumentParser(prog="python -m kilorl.monitor.exporter", description=main.__doc__)
    p.add_argument("--node", required=True)
    p.add_argument("--socket", required=True, help="Unix socket path the node's roles send snapshots to")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--stale-after-s", type=float, default=10.0)
    a = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with NodeExporter(a.node, a.socket, host=a.host, port=a.port, stale_after_s=a.stale_after_s) as exp:
        print(json.dumps({"node": a.node, "address": exp.address, "socket": exp.socket_path}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
