"""StoreClient: the native client of a data-system worker.

On the worker's host it talks over the Unix socket and maps the worker's arena: large
values are written straight into shared memory (``alloc`` + copy + ``commit``) and a
``get`` returns a read-only view of the arena under a lease (zero copy). The lease is
released when the last view is garbage collected (piggybacked on the next request).
Small values, and every value for remote clients, travel inline in the frame payload.
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

from kilorl.store.client import board_writes
from kilorl.store.client.batches import publish_batch
from kilorl.store.client.board_reads import CopyInto, board_read, head_only
from kilorl.store.client.board_writes import BoardPublisher
from kilorl.store.client.reconnect import RECONNECT_TIMEOUT_S, ride_out
from kilorl.store.client.replay import ReplayTables
from kilorl.store.client.streams import Consumer, Producer
from kilorl.store.client.types import Versioned, WriteMode, resolve_token
from kilorl.store.errors import (
    ConfigError,
    ConnectionLost,
    InvalidRequest,
    ProtocolError,
    StoreError,
    StoreTimeout,
    error_from_code,
)
from kilorl.store.wire import codec as serialization
from kilorl.store.wire.board import BoardReader, ClientSlots
from kilorl.store.wire.protocol import FramedSocket, host_identity, parse_address
from kilorl.store.wire.shm import Arena

HOME_CHECK_S = 1.0
"""How often a failed-over client checks whether its own worker serves again."""


class StoreClient:
    """KV, versioned-object and stream API of one worker. Thread-safe (one connection)."""

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

    # -- transport -----------------------------------------------------------------------
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

    # -- KV ------------------------------------------------------------------------------
    def set(self, key: str, value: Any, write_mode: WriteMode = WriteMode.NONE_L2, ttl: float | None = None,
            tier: str | None = None, pin: bool = False, if_absent: bool = False) -> bool:
        """Stores ``value`` (bytes, str, ndarray, tensor, dict of them) under ``key``.

        ``if_absent``: only if the key does not exist yet, decided atomically by the worker
        (on a mesh by the key's ring owner): of concurrent writers exactly one stores.
        Returns whether the value was stored (always True without ``if_absent``)."""
        fields = {"key": key, "mode": WriteMode(write_mode).value, "ttl": ttl, "tier": tier, "pin": pin}
        if if_absent:
            fields["nx"] = True
        resp = self._retrying(lambda: self._write(dict(fields), value))
        return bool(resp.get("stored", True))

    def incr(self, key: str, delta: int = 1) -> int:
        """Adds ``delta`` to the integer counter ``key`` (absent: 0) atomically in the worker
        (on a mesh on the key's ring owner) and returns the new value. The counter is stored
        as decimal bytes: ``get`` returns e.g. ``b"42"``. A retry after a lost connection
        may apply ``delta`` twice."""
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise InvalidRequest(f"delta: expected an int, got {type(delta).__name__}")
        return int(self._retrying(lambda: self._call({"op": "incr", "key": key, "delta": delta}))[0]["value"])

    def get(self, key: str, timeout: float | None = None) -> Any:
        """The value of ``key``; local large values are read-only zero-copy views.

        With ``timeout`` it waits that long for the key to appear.
        """
        def once() -> Any:
            resp, payload = self._call({"op": "get", "key": key, "zc": self._zc(), "timeout": timeout})
            return self._materialize(resp, payload)
        return self._retrying(once)

    def get_range(self, key: str, offset: int, length: int) -> memoryview:
        """``length`` bytes of ``key`` from byte ``offset`` on, as a read-only buffer (a
        zero-copy view of the local arena for large ranges). From a remote holder only these
        bytes move. ``describe`` gives the offsets of a stored dict's tensors."""
        def once() -> Any:
            resp, payload = self._call({"op": "get_range", "key": key, "offset": offset, "length": length,
                                        "zc": self._zc()})
            return self._materialize(resp, payload)
        return self._retrying(once)

    def describe(self, key: str) -> dict[str, Any]:
        """What ``key`` holds without reading it: ``type`` and ``size``; arrays/tensors add
        ``dtype`` and ``shape``; a dict adds ``entries``: name -> ``kind``, ``dtype``,
        ``shape``, byte ``offset`` and ``nbytes``."""
        resp, _ = self._retrying(lambda: self._call({"op": "describe", "key": key}))
        resp.pop("ok", None)
        return resp

    def mset(self, items: dict[str, Any], write_mode: WriteMode = WriteMode.NONE_L2, ttl: float | None = None,
             tier: str | None = None) -> None:
        for key, value in items.items():
            self.set(key, value, write_mode=write_mode, ttl=ttl, tier=tier)

    def mget(self, keys: list[str]) -> list[Any]:
        """Values of ``keys`` in order, ``None`` for missing ones."""
        resp, payload = self._retrying(lambda: self._call({"op": "mget", "keys": list(keys), "zc": self._zc()}))
        return self._materialize_items(resp["items"], payload)

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

    def delete(self, *keys: str) -> int:
        return self._retrying(lambda: self._call({"op": "delete", "keys": list(keys)}))[0]["n"]

    def exists(self, key: str) -> bool:
        return self.exists_many([key])[0]

    def exists_many(self, keys: list[str]) -> list[bool]:
        """Whether each of ``keys`` exists (anywhere on a mesh), in order, in one request."""
        keys = list(keys)
        if not all(isinstance(k, str) for k in keys):
            raise InvalidRequest("keys: every key must be a string")
        found = self._retrying(lambda: self._call({"op": "exists", "keys": keys}))[0]["found"]
        return [bool(f) for f in found]

    def expire(self, key: str, ttl: float | None) -> bool:
        """Sets (or with ``None`` clears) a key's time to live; False if the key is absent."""
        return self._call({"op": "expire", "key": key, "ttl": ttl})[0]["found"]

    def keys(self, prefix: str = "", local_only: bool = False) -> list[str]:
        """Keys starting with ``prefix``, sorted; on a mesh every worker's keys once each
        (``local_only``: just the keys whose bytes this worker holds). Versioned objects
        (``publish``) are not keys: ``version_list`` lists their names and versions."""
        header = {"op": "keys", "prefix": prefix, "local_only": local_only}
        return self._retrying(lambda: self._call(dict(header)))[0]["keys"]

    def version_list(self, prefix: str = "") -> dict[str, list[dict[str, Any]]]:
        """Versioned names starting with ``prefix`` whose versions this worker holds:
        name -> ``[{"version", "tier", "size"}, ...]``, oldest first (on a mesh, ask each
        member: a version's bytes live where it was published or read)."""
        return self._retrying(lambda: self._call({"op": "version_list", "prefix": prefix}))[0]["names"]

    def pin(self, key: str, on: bool = True) -> None:
        """Keeps an object in its current tier (no demotion, no eviction) until unpinned."""
        self._call({"op": "pin", "key": key, "on": on})

    def unpin(self, key: str) -> None:
        self.pin(key, False)

    def locate(self, key: str) -> dict[str, Any]:
        """Where an object lives (tier, arena offset, heat, L2 state): for tools and tests."""
        resp, _ = self._call({"op": "locate", "key": key})
        resp.pop("ok", None)
        return resp

    def stats(self) -> dict[str, Any]:
        """The worker's counters; ``connection`` is this client's: its ``bytes_read`` counts the
        bytes read through requests and, on the worker's host, straight from its version board
        (``board_reads`` of them)."""
        resp, _ = self._call({"op": "stats"})
        resp.pop("ok", None)
        conn = resp.get("connection")
        if isinstance(conn, dict):
            conn["bytes_read"] = conn.get("bytes_read", 0) + self.board_bytes_read
            conn["board_reads"] = self.board_reads
        return resp

    def ping(self) -> bool:
        return bool(self._call({"op": "ping"})[0].get("pong"))

    def flush_releases(self) -> None:
        """Returns leases of dropped views now instead of with the next request."""
        if self._released:
            self._call({"op": "release"})

    def shutdown_worker(self) -> None:
        """Asks the worker to stop cleanly (write-back queue flushed)."""
        self._call({"op": "shutdown"})

    # -- versioned objects ---------------------------------------------------------------
    def publish(self, name: str, value: Any, version: int | None = None,
                write_mode: WriteMode = WriteMode.NONE_L2) -> int:
        """Publishes ``value`` as the next version of ``name`` and returns its number.

        ``version`` picks the number (it must be newer than the latest); by default it is
        the latest + 1. On a mesh of workers the history is one per name, whichever
        worker a publisher or reader talks to."""
        fields = {"ver": [name, version], "mode": WriteMode(write_mode).value}
        return self._retrying(lambda: self._write(dict(fields), value))["version"]

    def publish_many(self, items: list[tuple[str, Any, int | None]],
                     write_mode: WriteMode = WriteMode.NONE_L2, on_board: bool = False) -> list[int]:
        """Publishes ``items`` = [(name, value, version or None), ...] in order, pipelined:
        one round trip for all (two when values go through the arena), and the first
        failure stops the rest (they are not published and its error is raised), so a
        part published last, e.g. a commit record, is only there when all before it are.

        ``on_board``: on the worker's host, a publish of small versions with their numbers
        given names them on the worker's version board itself, before the commit request,
        so readers there wake one process hop sooner (``kilorl.store.client.board_writes``).
        The names' board slots are then this client's until it disconnects; other clients'
        versions of them are read by request."""
        mode = WriteMode(write_mode).value

        def once() -> list[int]:
            if on_board:
                got = self._publish_on_board(items, mode)
                if got is not None:
                    return got
            return publish_batch(self._pipeline, self._check_size, self.arena, self.inline_threshold, items, mode)
        return self._retrying(once)

    def _publish_on_board(self, items: list[tuple[str, Any, int | None]], mode: str) -> list[int] | None:
        board, arena = self.board, self.arena
        if board is None or arena is None or board.stale:
            return None
        encoded = [serialization.encode(value) for _, value, _ in items]
        if not board_writes.eligible(items, encoded, mode):
            return None
        with self._board_pub_lock:
            pub = self._board_pub
            if pub is None or pub.epoch != self._epoch:
                pub = self._board_pub = BoardPublisher(ClientSlots(board.arena), arena, self._epoch)
        return pub.publish(self._pipeline, items, encoded)

    def latest_version(self, name: str) -> int | None:
        return self._retrying(lambda: self._call({"op": "latest_version", "name": name}))[0]["version"]

    def get_version(self, name: str, version: int | None = None,
                    ranges: list[tuple[int, int]] | None = None) -> Versioned:
        """One version (the latest by default) as ``(version, value)``, read as one whole.

        With ``ranges`` = [(offset, length), ...] the value is a list of read-only buffers,
        one per range; from a remote holder only those bytes move (``describe`` of a
        dict gives its tensors' offsets)."""
        header = {"op": "get_version", "name": name, "version": version, "zc": self._zc(),
                  "ranges": [list(r) for r in ranges] if ranges is not None else None}

        def once() -> Versioned:
            resp, payload = self._call(dict(header))
            if ranges is None:
                return Versioned(resp["version"], self._materialize(resp, payload))
            return Versioned(resp["version"], self._materialize_items(resp["items"], payload))
        return self._retrying(once)

    def get_versions(self, reads: list[tuple[str, list[tuple[int, int]] | None]], version: int | None = None,
                     min_version: int | None = None, timeout: float | None = None) -> Versioned:
        """Several published names at one version number, in one request: ``(version, values)``.

        ``reads`` = [(name, ranges or None), ...]; the first name is the anchor (for an
        object published as parts, the part published last). The version is ``version``,
        else the anchor's latest, after waiting (up to ``timeout``) for it to reach
        ``min_version``: a wait whose wake-up brings the bytes. ``values[i]`` is the whole
        value of ``reads[i]``, or one read-only buffer per range. A name not held at that
        version raises ``VersionGone``."""
        if self.board is not None and self.arena is not None:
            got, timeout = board_read(self.board, self.arena.view, reads, version, min_version, timeout,
                                      self.latest_version, self._connected)
            if got is not None:
                self.board_reads += 1
                self.board_bytes_read += got[1]
                return got[0]
        wire = [[name, [list(r) for r in ranges] if ranges is not None else None] for name, ranges in reads]
        header = {"op": "get_versions", "reads": wire, "version": version, "min_version": min_version,
                  "timeout": timeout, "zc": self._zc()}
        if self.pull_whole:
            header["pull_whole"] = True

        def once() -> Versioned:
            resp, payload = self._call(dict(header))
            flat = self._materialize_items(resp["items"], payload)
            values, pos = [], 0
            for _, ranges in reads:
                n = 1 if ranges is None else len(ranges)
                values.append(flat[pos] if ranges is None else flat[pos:pos + n])
                pos += n
            return Versioned(resp["version"], values)
        return self._retrying(once)

    def wait_version(self, name: str, min_version: int, timeout: float | None = None,
                     committed: bool = False) -> int:
        """Blocks until ``name`` reaches ``min_version`` (or ``timeout``); returns the latest
        (on the worker's host: the board's, when it names ``name`` at ``min_version`` or later).

        ``committed``: ask the worker, never the board. A publisher on the worker's host names
        its versions on the board before it commits them, so a version the board names may
        not be readable by number yet; this waits until it is."""
        if self.board is not None and self.arena is not None and not committed:
            got, timeout = board_read(self.board, self.arena.view, [(name, None)], None, min_version, timeout,
                                      self.latest_version, self._connected, head_only)
            if got is not None:
                return got[0].version
        header = {"op": "wait_version", "name": name, "min_version": min_version, "timeout": timeout}
        return self._retrying(lambda: self._call(dict(header)))[0]["version"]

    def read_into(self, reads: list[tuple[str, list[tuple[int, int]] | None]], into: CopyInto,
                  version: int | None = None, min_version: int | None = None) -> int | None:
        """``reads`` copied straight from this host's arena into a reader's arrays (``into``):
        the version, or None where the board cannot serve it now (not on the worker's host,
        another version or layout, a version replaced under the copy). After None the arrays
        may hold part of a version: read a whole one the usual way. Never waits: a version
        below ``min_version`` is a None."""
        if self.board is None or self.arena is None:
            return None
        try:
            got, _ = board_read(self.board, self.arena.view, reads, version, min_version, 0.0,
                                self.latest_version, self._connected, into)
        except StoreTimeout:
            return None
        if got is None:
            return None
        self.board_reads += 1
        self.board_bytes_read += got[1]
        return got[0].version

    # -- streams -------------------------------------------------------------------------
    def producer(self, stream: str, capacity: int | None = None) -> Producer:
        return Producer(self._call, self._check_size, stream, capacity)

    def consumer(self, stream: str, group: str) -> Consumer:
        return Consumer(self._call, stream, group)

    # -- replay tables -------------------------------------------------------------------
    @property
    def replay_tables(self) -> ReplayTables:
        """The worker's replay tables (``kilorl.store.client.replay``), over this connection."""
        group = self.__dict__.get("_replay_tables")
        if group is None:
            group = self._replay_tables = ReplayTables(lambda header, buffers=(): self._retrying(
                self._call, header, buffers))
        return group

    def close(self) -> None:
        self._fs.close()
        if self._board_pub is not None:
            self._board_pub.close()
            self._board_pub = None
        if self.board is not None:
            self.board.close()
        if self.arena is not None:
            self.arena.close()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
