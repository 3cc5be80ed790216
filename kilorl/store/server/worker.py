"""The worker process: listens on TCP and a Unix socket, one thread per connection.

Every connection must first say ``hello`` with the token (TCP always, unless the worker
runs ``--insecure`` on loopback; the Unix socket too when a token is set). Requests are
dispatched through ``Worker.handlers`` (op name -> function, given at construction:
``launch.py`` builds a worker with ``handlers.HANDLERS``); everything that reaches
other workers goes through ``Worker.router`` (``router.py``). A frame that breaks the
protocol closes that connection only; its leases, half-done writes and stream
deliveries are released, and everyone else keeps being served.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import secrets
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kilorl.store.errors import AuthError, BatchAborted, ConfigError, InvalidRequest, ProtocolError, StoreError
from kilorl.store.local.config import ResolvedConfig
from kilorl.store.local.entries import Region
from kilorl.store.local.keyspace import KeySpace
from kilorl.store.local.objects import ObjectStore
from kilorl.store.local.streams import StreamTable
from kilorl.store.local.versions import HIDDEN, VersionTable
from kilorl.store.server.board import WorkerBoard
from kilorl.store.server.request import Handler
from kilorl.store.server.router import Router
from kilorl.store.server.version_book import LocalVersionBook, VersionBook
from kilorl.store.wire.protocol import ConnectionClosed, FramedSocket, FrameLimits, check_token, host_identity
from kilorl.store.wire.shm import Arena

log = logging.getLogger("kilorl.store.server.worker")


@dataclass(eq=False)
class Connection:
    """Per-connection state; everything here is released when the connection ends."""

    id: int
    transport: str
    fs: FramedSocket
    peer: str
    authed: bool = False
    same_host: bool = False
    leases: dict[int, Region] = field(default_factory=dict)
    allocs: dict[int, Region] = field(default_factory=dict)
    bytes_read: int = 0
    """Object bytes handed to this client by reads (leased views and inline copies alike)."""
    failed_batch: Any = None
    """The ``batch`` id of the last request that failed: later requests of it are skipped."""
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def next_id(self) -> int:
        return next(self._ids)


class Worker:
    """One data-system worker: arena, object table, versions, streams and listeners."""

    def __init__(self, rc: ResolvedConfig, handlers: dict[str, Handler]):
        self.rc = rc
        spec = rc.spec
        self.pid = os.getpid()
        self.host_id = host_identity()
        self.token = spec.token or os.environ.get("KILORL_STORE_TOKEN") or None
        if self.token is None and not spec.insecure:
            self.token = secrets.token_urlsafe(24)
        self.run_dir = rc.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.limits = FrameLimits(max_payload=rc.max_payload)
        try:  # sockets first: a busy port must not leave an arena behind
            self.tcp = socket.create_server((spec.host, spec.port), backlog=256)
        except OSError as exc:
            raise ConfigError(f"port: cannot listen on {spec.host}:{spec.port}: {exc.strerror}") from None
        self.port = self.tcp.getsockname()[1]
        self.arena = Arena.create(rc.shm_bytes, prefault=False)
        self.arena.populate_in_background()  # at idle priority: the worker is ready at once
        self.store = ObjectStore(rc, self.arena)
        try:
            self.board = WorkerBoard.create(self.store)
        except BaseException:
            self.arena.close()
            raise
        self.keyspace = KeySpace(self.store)
        self.versions = VersionTable(spec.keep_versions)
        surplus = self.versions.rebuild(self.keyspace.keys(HIDDEN, include_hidden=True))
        if surplus:
            self.delete_l2(self.store.delete(surplus)[1])
        self.streams = StreamTable(spec.stream_capacity, spec.ack_timeout_s)
        self.handlers: dict[str, Handler] = dict(handlers)
        self.services: list[Any] = []
        self.replay: Any = None
        """The replay tables' service, when hosted (``server/replay_ops.install``)."""
        self.router: Router = Router()  # a worker alone; a multi-node layer sets its own
        self.local_book = LocalVersionBook(self.versions)
        self._stopping = threading.Event()
        self.rmw_lock = threading.Lock()
        """Orders this worker's read-modify-write ops (``incr``, server/counters.py)."""
        self.connections: dict[int, Connection] = {}
        self._conn_ids = itertools.count(1)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self.unix_path = self.run_dir / "worker.sock"
        if self.unix_path.exists():
            self.unix_path.unlink()
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(str(self.unix_path))
        os.chmod(self.unix_path, 0o600)
        self.unix.listen(256)
        self._write_run_files()

    # -- extension point ---------------------------------------------------------------
    def register(self, op: str, handler: Handler) -> None:
        """Adds a request type (used by layers above: worker-to-worker ops, a hosted metastore).
        Replacing an existing op is refused: behaviour changes go through the router."""
        if op in self.handlers:
            raise ValueError(f"op {op!r} is already registered")
        self.handlers[op] = handler

    def set_router(self, router: Router) -> None:
        """Connects the worker to other workers (once, before serving)."""
        self.router = router

    def version_book(self) -> VersionBook:
        """Where the history of published names is kept (the router's, or this worker's)."""
        return self.router.versions() or self.local_book

    def add_service(self, service: Any) -> None:
        """Hosts a component in this worker (e.g. a metastore): ``service.start(worker)`` runs
        when serving begins, ``service.stop()`` at shutdown before L2 is flushed."""
        self.services.append(service)

    def close_unserved(self) -> None:
        """Releases sockets and arena of a worker that never started serving."""
        self.tcp.close()
        self.unix.close()
        if self.board is not None:
            self.board.close()
        self.arena.close()

    def delete_l2(self, items: list[tuple[str, str]]) -> None:
        """Removes L2 copies: at once for write-through objects, queued for write-back ones."""
        if self.store.l2 is None:
            return
        for key, mode in items:
            if mode == "through":
                self.store.l2.delete(key)
            else:
                self.store.l2.enqueue_delete(key)

    def _write_run_files(self) -> None:
        if self.token is not None and not self.rc.spec.token:
            tok = self.run_dir / "token"
            fd = os.open(tok, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.token)
        info = {"pid": self.pid, "host": self.rc.spec.host, "port": self.port, "unix": str(self.unix_path),
                "arena": str(self.arena.path), "arena_size": self.arena.size, "started": time.time()}
        tmp = self.run_dir / "worker.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.run_dir / "worker.json")

    # -- serving -----------------------------------------------------------------------
    def serve_forever(self) -> None:
        threading.Thread(target=self._housekeeping, name="housekeeping", daemon=True).start()
        for service in self.services:
            service.start(self)
        sel = selectors.DefaultSelector()
        sel.register(self.tcp, selectors.EVENT_READ, "tcp")
        sel.register(self.unix, selectors.EVENT_READ, "unix")
        log.info("worker %d serving on %s:%d and %s (arena %s, %d bytes)", self.pid, self.rc.spec.host,
                 self.port, self.unix_path, self.arena.path, self.arena.size)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    try:
                        sock, addr = key.fileobj.accept()
                    except OSError:
                        continue
                    self._start_connection(sock, key.data, addr)
        finally:
            sel.close()
            self._shutdown()

    def _start_connection(self, sock: socket.socket, transport: str, addr: Any) -> None:
        if transport == "tcp":
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(next(self._conn_ids), transport, FramedSocket(sock, self.limits), str(addr or "unix"))
        self.connections[conn.id] = conn
        threading.Thread(target=self._serve_connection, args=(conn,), name=f"conn-{conn.id}", daemon=True).start()

    def _serve_connection(self, conn: Connection) -> None:
        fs = conn.fs
        try:
            while True:
                header, _ = fs.read_header()
                if not conn.authed:
                    self._hello(conn, header)
                    continue
                rel = header.get("rel")
                if rel:
                    self._release_leases(conn, rel)
                self._dispatch(conn, header)
        except ConnectionClosed:
            pass
        except ProtocolError as exc:
            log.warning("closing connection %d (%s): %s", conn.id, conn.peer, exc)
        except OSError as exc:
            if not self._stop.is_set():
                log.info("connection %d (%s) ended: %s", conn.id, conn.peer, exc)
        finally:
            self._close_connection(conn)

    def _dispatch(self, conn: Connection, header: dict[str, Any]) -> None:
        """Runs one request and sends its reply; an op's error is a reply, not the end of the
        connection. Replies to pipelined requests are corked (``FramedSocket.send``); a
        request of a ``batch`` that already failed is skipped (``BatchAborted``)."""
        fs = conn.fs
        op = header.get("op")
        handler = self.handlers.get(op) if isinstance(op, str) else None
        batch = header.get("batch")
        try:
            if batch is not None and batch == conn.failed_batch:
                raise BatchAborted(f"skipped: an earlier request of batch {batch!r} failed")
            if handler is None:
                raise InvalidRequest(f"op: unknown operation {op!r}")
            reply = handler(self, conn, header)
        except ProtocolError:
            raise
        except StoreError as exc:  # the op's answer (StoreTimeout and ConnectionLost are OSErrors too)
            self._refuse(conn, batch, exc.code, str(exc))
            return
        except (ConnectionClosed, OSError):
            raise
        except Exception as exc:  # a bug must not kill the worker: report it
            log.exception("op %r failed", op)
            self._refuse(conn, batch, "store_error", f"internal error: {exc!r}")
            return
        if fs.pending_payload:
            fs.skip_payload()
        reply.header["ok"] = True
        try:
            fs.send(reply.header, reply.buffers, cork=fs.has_input())
        finally:
            if reply.after is not None:
                reply.after()

    @staticmethod
    def _refuse(conn: Connection, batch: Any, code: str, msg: str) -> None:
        """An error reply (the request's payload skipped); a failed batch skips its rest."""
        if batch is not None:
            conn.failed_batch = batch
        if conn.fs.pending_payload:
            conn.fs.skip_payload()
        conn.fs.send({"ok": False, "code": code, "msg": msg}, cork=conn.fs.has_input())

    def _hello(self, conn: Connection, header: dict[str, Any]) -> None:
        if header.get("op") != "hello":
            raise ProtocolError(f"first request must be 'hello', got {header.get('op')!r}")
        if not check_token(self.token, header.get("token")):
            conn.fs.send({"ok": False, "code": AuthError.code, "msg": "authentication failed: wrong or missing token"})
            raise ProtocolError("authentication failed")
        conn.authed = True
        conn.same_host = header.get("host_id") == self.host_id
        reply = {"ok": True, "pid": self.pid, "host_id": self.host_id, "unix": str(self.unix_path),
                 "max_payload": self.rc.max_payload, "conn": conn.id}
        if conn.same_host:
            reply.update(arena=str(self.arena.path), arena_size=self.arena.size)
            if self.board is not None:
                reply.update(board=self.board.path, board_size=self.board.size)
        reply.update(self.router.hello_fields())
        conn.fs.send(reply)

    def _release_leases(self, conn: Connection, ids: Any) -> None:
        regions = [conn.leases.pop(i) for i in ids if isinstance(i, int) and i in conn.leases] \
            if isinstance(ids, list) else []
        if regions:
            self.store.release(regions)

    def _close_connection(self, conn: Connection) -> None:
        self.connections.pop(conn.id, None)
        if self.board is not None:  # first: its slots may name its staged regions, released below
            self.board.unclaim(conn.id)
        regions = list(conn.leases.values()) + list(conn.allocs.values())
        conn.leases.clear()
        conn.allocs.clear()
        if regions:
            self.store.release(regions)
        self.streams.connection_closed(conn.id)
        conn.fs.close()

    def _housekeeping(self) -> None:
        while not self._stop.wait(0.25):
            try:
                self.keyspace.sweep()
                if self.board is not None:
                    self.board.sweep()
            except Exception:
                log.exception("housekeeping failed")

    # -- stopping ----------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stops serving; services with a ``drain()`` (a cluster member's graceful leave)
        run it first, while the worker still accepts and serves requests."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        drains = [s.drain for s in self.services if hasattr(s, "drain")]
        if not drains:
            self._stop.set()
            return

        def drain_then_stop() -> None:
            for drain in drains:
                try:
                    drain()
                except Exception:
                    log.exception("draining %r failed", drain)
            self._stop.set()

        threading.Thread(target=drain_then_stop, name="drain", daemon=True).start()

    def _shutdown(self) -> None:
        log.info("worker %d stopping", self.pid)
        for s in (self.tcp, self.unix):
            s.close()
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:
                log.exception("stopping service %r failed", service)
        if self.store.l2 is not None:
            self.store.l2.close()  # flushes every queued write-back entry
            log.info("L2 flushed (%d write-back entries)", self.store.l2.flushed)
        for conn in list(self.connections.values()):
            try:
                conn.fs.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.board is not None:
            self.board.close()
        self.arena.close()
        for name in ("worker.sock", "worker.json", "worker.pid", "token"):
            try:
                (self.run_dir / name).unlink()
            except FileNotFoundError:
                pass
        self._stopped.set()
