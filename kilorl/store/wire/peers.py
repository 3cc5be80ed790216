"""Worker-to-worker connections: raw frames over TCP, pooled per peer address.

A ``PeerConn`` is one authenticated connection; ``call_into`` receives a reply payload
straight into a caller's buffer (an arena slice), so bytes pulled from a peer never
pass through a Python ``bytes`` object. ``PeerPool`` hands each calling thread its own
connection per peer (a long transfer never blocks a metadata call to the same peer).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from kilorl.store.errors import ConnectionLost, ProtocolError, StoreError, error_from_code
from kilorl.store.wire.protocol import FramedSocket, FrameLimits, host_identity, parse_address


class PeerUnreachable(ConnectionLost):
    """A peer worker could not be reached or dropped the connection."""

    code = "peer_unreachable"


_PEER_LIMITS = FrameLimits(max_payload=1 << 40)


class PeerConn:
    """One authenticated connection to a peer worker."""

    def __init__(self, address: str, token: str | None, timeout: float = 60.0,
                 limits: FrameLimits = _PEER_LIMITS):
        self.address = address
        host, port = parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=min(timeout, 5.0))
        except OSError as exc:
            raise PeerUnreachable(f"peer {address} unreachable: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        self.fs = FramedSocket(sock, limits)
        # A peer is another process: never ask for the arena (no zero-copy leases across workers).
        self.call({"op": "hello", "token": token, "host_id": "peer:" + host_identity(), "pid": os.getpid()})

    def send(self, header: dict[str, Any], buffers: Sequence[Any] = ()) -> None:
        try:
            self.fs.send(header, buffers)
        except OSError as exc:
            raise PeerUnreachable(f"peer {self.address} lost: {exc!r}") from None

    def recv(self, target: memoryview | None = None) -> tuple[dict[str, Any], memoryview | None]:
        """Reads one reply; its payload goes into ``target`` when given (length must match)."""
        try:
            resp, plen = self.fs.read_header()
            payload = None
            if plen:
                if target is not None and len(target) == plen:
                    self.fs.read_payload_into(target)
                    payload = target
                else:
                    payload = memoryview(self.fs.read_payload())
        except (OSError, EOFError, ProtocolError) as exc:
            raise PeerUnreachable(f"peer {self.address} lost: {exc!r}") from None
        if not resp.get("ok"):
            raise error_from_code(resp.get("code", ""), resp.get("msg", "peer request failed"))
        return resp, payload

    def call(self, header: dict[str, Any], buffers: Sequence[Any] = (),
             target: memoryview | None = None) -> tuple[dict[str, Any], memoryview | None]:
        self.send(header, buffers)
        return self.recv(target)

    def close(self) -> None:
        self.fs.close()


class PeerPool:
    """Idle connections per peer address; a connection that failed is dropped, not reused."""

    def __init__(self, token: str | None, timeout: float = 60.0):
        self.token = token
        self.timeout = timeout
        self._idle: dict[str, list[PeerConn]] = {}
        self._lock = threading.Lock()
        self.closed = False

    @contextlib.contextmanager
    def conn(self, address: str) -> Iterator[PeerConn]:
        with self._lock:
            pool = self._idle.get(address)
            c = pool.pop() if pool else None
        if c is None:
            c = PeerConn(address, self.token, self.timeout)
        ok = False
        try:
            yield c
            ok = True
        except StoreError as exc:
            ok = not isinstance(exc, ConnectionLost) and not c.fs.pending_payload
            raise
        finally:
            if ok and not self.closed:
                with self._lock:
                    self._idle.setdefault(address, []).append(c)
            else:
                c.close()

    def call(self, address: str, header: dict[str, Any], buffers: Sequence[Any] = ()) -> dict[str, Any]:
        with self.conn(address) as c:
            return c.call(header, buffers)[0]

    def forget(self, address: str) -> None:
        with self._lock:
            conns = self._idle.pop(address, [])
        for c in conns:
            c.close()

    def close(self) -> None:
        self.closed = True
        with self._lock:
            conns = [c for pool in self._idle.values() for c in pool]
            self._idle.clear()
        for c in conns:
            c.close()
