"""The connection part of the native store client: sockets, leases, fail-over and the one
call primitive every command group sends through.

Split from the commands the way redis-py splits ``Redis`` into a connection and command
groups: ``_call`` sends one request and reads its reply, ``_pipeline`` sends many in one
round trip, and ``_retrying`` rides out a lost connection (``kilorl.store.client.reconnect``).
On the worker's host it talks over the Unix socket and maps the worker's arena: large values
are written straight into shared memory (``alloc`` + copy + ``commit``) and reads return
read-only views of the arena under a lease (zero copy), released when the last view is
garbage collected (piggybacked on the next request). Small values, and every value for
remote clients, travel inline in the frame payload.
"""

from __future__ import annotations

import collections
import ctypes
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from kilorl.store.client.board_writes import BoardPublisher
from kilorl.store.client.reconnect import RECONNECT_TIMEOUT_S, ride_out
from kilorl.store.client.types import resolve_token
from kilorl.store.errors import (
    ConfigError,
    ConnectionLost,
    InvalidRequest,
    ProtocolError,
    StoreError,
    error_from_code,
)
from kilorl.store.wire import codec as serialization
from kilorl.store.wire.board import BoardReader
from kilorl.store.wire.protocol import FramedSocket, host_identity, parse_address
from kilorl.store.wire.shm import Arena

HOME_CHECK_S = 1.0
"""How often a failed-over client checks whether its own worker serves again."""


class Connection:
    """One connection to a worker (thread-safe): what every command group sends through."""

    def __init__(self, address: str = "127.0.0.1:31501", token: str | None = None, *, zero_copy: bool = True,
                 inline_threshold: int = 64 * 1024, connect_timeout: float = 10.0, run_dir: str | None = None,
                 use_unix_socket: bool = True, reconnect_timeout: float = RECONNECT_TIMEOUT_S, replay: bool = True):
        """``reconnect_timeout``: seconds an operation that met a broken connection keeps
        reconnecting (this worker, restarted on its port, or another member of its cluster)
        before ``WorkerUnreachable``; ``replay``: repeat the operation once reconnected (False:
        raise ``Reconnected``, for callers that must first check what the worker still holds).
        The first connection is not retried: a worker that is not there fails at once."""
        parse_address(address)
        if not reconnect_timeout >= 0:
            raise ConfigError(f"reconnect_timeout: must be >= 0 seconds, got {reconnect_timeout!r}")
        self.reconnect_timeout = reconnect_timeout
        self.replay = replay
        self.pull_whole = False
        """``get_versions`` of a version held by another worker copies it whole to this one,
        once, for every reader here, instead of pulling just the ranges for this reader
        (a node's parameter readers: ``StoreParameterStore(shard_homes=...)``)."""
        self.address = address
        self.inline_threshold = inline_threshold
        self._token_arg, self._run_dir = token, run_dir
        self._zero_copy, self._use_unix, self._connect_timeout = zero_copy, use_unix_socket, connect_timeout
        self._lock = threading.Lock()
        self._released: collections.deque[int] = collections.deque()
        self._epoch = 0
        self.arena: Arena | None = None
        self.board: BoardReader | None = None
        """The worker's version board (on its host): small versions read without a request."""
        self._board_pub: BoardPublisher | None = None
        """This connection's board-named publishes (``publish_many(..., on_board=True)``)."""
        self._board_pub_lock = threading.Lock()  # one publisher per connection: one writer per slot
        self.board_reads = 0
        self.board_bytes_read = 0
        """Reads served from the board and their bytes (``stats()`` counts them with the connection's)."""
        self.members: list[str] = []
        self.failovers = 0
        self.home = address
        """The worker this client was given (e.g. its node's): after a failover it goes back
        there once that worker serves again, so node-local (zero-copy) reads come back."""
        self._home_check_at = 0.0
        self._connect(address)

    def _connect(self, address: str) -> None:
        """(Re)connects to ``address``; leases of an earlier connection are forgotten (they
        died with it), its arena mapping stays alive as long as views of it exist."""
        host, port = parse_address(address)
        token = resolve_token(self._token_arg, host, port, self._run_dir)
        self._token = token
        sock = socket.create_connection((host, port), timeout=self._connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self._epoch += 1
        self._released.clear()
        self._fs = FramedSocket(sock)
        self.transport = "tcp"
        info = self._hello()
        if self._use_unix and "arena" in info and os.path.exists(info["unix"]):
            try:
                usock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                usock.connect(info["unix"])
            except OSError:
                pass
            else:
                self._fs.close()
                self._fs = FramedSocket(usock)
                self.transport = "unix"
                info = self._hello()
        self.info = info
        self.address = address
        if info.get("members"):
            self.members = list(info["members"])
        self.arena = None
        self._board_pub = None  # its claims and regions ended with the old connection
        if self.board is not None:  # another thread may be reading it: mark it, the mapping goes with it
            self.board.stale = True
        self.board = None
        if self._zero_copy and "arena" in info:
            try:
                self.arena = Arena.attach(info["arena"], info["arena_size"])
                if "board" in info:
                    self.board = BoardReader.attach(info["board"], info["board_size"])
            except OSError:
                pass  # e.g. another user's worker: fall back to inline transfers

    def _failover(self, why: Exception) -> None:
        """Connects again: to another live member of the worker's cluster first, else to this
        address (a worker restarted on its port); ``ConnectionLost`` when none answers now."""
        candidates = [a for a in self.members if a != self.address] + [self.address]
        self._fs.close()
        for address in candidates:
            try:
                self._connect(address)
                self.failovers += 1
                return
            except (OSError, StoreError):
                continue
        raise ConnectionLost(f"no member of the cluster is reachable (last error: {why})") from why

    def _return_home(self) -> None:
        """After a failover, reconnect to ``home`` once it accepts connections (checked at most
        every ``HOME_CHECK_S``); while it does not, stay on the member we failed over to."""
        now = time.monotonic()
        if self.address == self.home or now < self._home_check_at:
            return
        self._home_check_at = now + HOME_CHECK_S
        try:
            socket.create_connection(parse_address(self.home), timeout=0.2).close()
        except OSError:
            return
        self._fs.close()
        try:
            self._connect(self.home)
        except (OSError, StoreError) as exc:
            self._failover(exc)

    def _retrying(self, fn, *args, **kw):
        """Runs one operation; a lost connection or a leaving worker is replaced by a new
        connection (this worker again, or another member of its cluster), retried with
        backoff until ``reconnect_timeout`` (``kilorl.store.client.reconnect``), and the
        operation repeated (or ``Reconnected`` raised, without ``replay``)."""
        def op():
            self._return_home()
            return fn(*args, **kw)
        return ride_out(op, self._failover, self.reconnect_timeout, self.replay, lambda: f"worker {self.home}")

    def _hello(self) -> dict[str, Any]:
        header, _ = self._call({"op": "hello", "token": self._token, "host_id": host_identity(), "pid": os.getpid()})
        return header

    def _call(self, header: dict[str, Any], buffers: Iterable[Any] = ()) -> tuple[dict[str, Any], memoryview | None]:
        rel = []
        while self._released:
            rel.append(self._released.popleft())
        if rel:
            header["rel"] = rel
        with self._lock:
            if self._fs.sock.fileno() < 0:
                raise ConnectionLost(f"connection to worker {self.address} is closed")
            try:
                self._fs.send(header, list(buffers))
                resp, plen = self._fs.read_header()
                payload = None
                if plen:
                    payload = memoryview(np.empty(plen, dtype=np.uint8))  # no zero-fill, unlike bytearray
                    self._fs.read_payload_into(payload)
            except (OSError, EOFError, ProtocolError) as exc:
                raise ConnectionLost(f"connection to worker {self.address} lost: {exc!r}") from exc
        if not resp.get("ok"):
            raise error_from_code(resp.get("code", ""), resp.get("msg", "request failed"))
        return resp, payload

    def _pipeline(self, requests: list[tuple[dict[str, Any], list[Any]]]) -> list[dict[str, Any] | StoreError]:
        """Sends every request, then reads every reply: one round trip for all of them.

        Each reply is its header, or the error it carried (payloads are not expected)."""
        if not requests:
            return []
        rel = []
        while self._released:
            rel.append(self._released.popleft())
        if rel:
            requests[0][0]["rel"] = rel
        out: list[dict[str, Any] | StoreError] = []
        with self._lock:
            if self._fs.sock.fileno() < 0:
                raise ConnectionLost(f"connection to worker {self.address} is closed")
            try:
                self._fs.send_many(requests)
                for _ in requests:
                    resp, plen = self._fs.read_header()
                    if plen:
                        self._fs.skip_payload()
                    out.append(resp if resp.get("ok") else
                               error_from_code(resp.get("code", ""), resp.get("msg", "request failed")))
            except (OSError, EOFError, ProtocolError) as exc:
                raise ConnectionLost(f"connection to worker {self.address} lost: {exc!r}") from exc
        return out

    def _connected(self) -> bool:
        """Whether the connection is open (not closed by the worker): one non-blocking peek."""
        try:
            return self._fs.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def _release_lease(self, epoch: int, lease: int) -> None:
        if epoch == self._epoch:  # leases of an earlier connection ended with it
            self._released.append(lease)

    def _check_size(self, nbytes: int) -> None:
        if nbytes > self.info["max_payload"]:
            raise InvalidRequest(f"value: {nbytes} bytes exceed the worker's frame limit of "
                                 f"{self.info['max_payload']} bytes (--max-payload)")

    def _zc(self) -> int | None:
        return self.inline_threshold if self.arena is not None else None

    def _materialize(self, item: dict[str, Any], payload: memoryview | None, offset: int = 0) -> Any:
        meta, size = item["meta"], item["size"]
        if "loc" in item:
            # A ctypes array over the arena is the buffer exporter of every view made from it
            # (numpy, torch, memoryview slices keep it alive), so its finalizer runs exactly
            # when the last view is gone: that is when the lease can be returned.
            holder = (ctypes.c_char * size).from_buffer(self.arena.mm, item["loc"]) if size else bytearray()
            if size:
                weakref.finalize(holder, self._release_lease, self._epoch, item["lease"])
            else:
                self._released.append(item["lease"])
            return serialization.decode(meta, memoryview(holder).cast("B"))
        if "cuda_ipc" in item:  # UNTESTED here: needs a CUDA machine
            from kilorl.store.wire.cuda_ipc import open_ipc_handle

            return serialization.decode_device(meta, open_ipc_handle(item["cuda_ipc"]))
        return serialization.decode(meta, payload[offset:offset + size] if payload is not None else memoryview(b""))

    def _write(self, fields: dict[str, Any], value: Any) -> dict[str, Any]:
        enc = serialization.encode(value)
        self._check_size(enc.nbytes)
        fields["meta"] = enc.meta
        if self.arena is not None and enc.nbytes >= self.inline_threshold:
            resp, _ = self._call({"op": "alloc", "size": enc.nbytes})
            try:
                enc.write_into(self.arena.view[resp["offset"]:resp["offset"] + enc.nbytes])
            except BaseException:
                self._call({"op": "abort", "ticket": resp["ticket"]})
                raise
            resp, _ = self._call({"op": "commit", "ticket": resp["ticket"], **fields})
            return resp
        resp, _ = self._call({"op": "set", **fields}, enc.buffers())
        return resp

    def _materialize_items(self, items: list[dict[str, Any] | None], payload: memoryview | None) -> list[Any]:
        out, pos = [], 0
        for item in items:
            if item is None:
                out.append(None)
            elif "loc" in item or "cuda_ipc" in item:  # no inline bytes for these
                out.append(self._materialize(item, None))
            else:
                out.append(self._materialize(item, payload, pos))
                pos += item["size"]
        return out

    def close(self) -> None:
        self._fs.close()
        if self._board_pub is not None:
            self._board_pub.close()
            self._board_pub = None
        if self.board is not None:
            self.board.close()
        if self.arena is not None:
            self.arena.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
