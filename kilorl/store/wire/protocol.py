"""Wire protocol of the data system: length-prefixed frames, msgpack header, raw payload.

A frame is a 16-byte prefix ``!2sBBIQ`` (magic ``KS``, protocol version, flags, header
length, payload length), a msgpack map (the typed header: ``op`` plus fields) and a raw
payload (object bytes, never pickled). Both lengths are checked against ``FrameLimits``
before anything is allocated, so a hostile length prefix costs nothing. Any violation
raises ``ProtocolError``; the worker then closes that one connection.

This module is standalone (only msgpack and the errors module) so that other layers,
e.g. a multi-node router, can speak the protocol without importing the worker.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from kilorl.store.errors import ProtocolError

MAGIC = b"KS"
VERSION = 1
PREFIX = struct.Struct("!2sBBIQ")
_SMALL_SEND = 64 * 1024


class ConnectionClosed(EOFError):
    """The peer closed the connection cleanly, between two frames."""


@dataclass(frozen=True)
class FrameLimits:
    """Upper bounds checked on every frame before allocating anything."""

    max_header: int = 64 * 1024
    """Largest msgpack header accepted, in bytes."""
    max_payload: int = 2 * 1024**3
    """Largest payload accepted in one frame, in bytes (a 4 GiB prefix is refused)."""


def _bytes_view(b: Any) -> memoryview:
    """``b`` as a flat byte view; one already flat is taken as it is (a cast re-exports the
    buffer: 1-3 µs per part, and a publish sends a dozen)."""
    if type(b) is memoryview and b.ndim == 1 and b.format == "B" and b.c_contiguous:
        return b
    return memoryview(b).cast("B")


def pack_header(header: dict[str, Any]) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


class FramedSocket:
    """A socket that reads and writes frames, with a receive buffer to save syscalls."""

    def __init__(self, sock: socket.socket, limits: FrameLimits = FrameLimits(), bufsize: int = 256 * 1024):
        self.sock = sock
        self.limits = limits
        self._buf = bytearray(max(bufsize, limits.max_header + PREFIX.size))
        self._mv = memoryview(self._buf)
        self._lo = 0
        self._hi = 0
        self.pending_payload = 0
        self._corked: list[bytes] = []

    # -- receiving ---------------------------------------------------------------------
    def has_input(self) -> bool:
        """Bytes of a next frame are already received (the peer pipelines its requests)."""
        return self._hi > self._lo and not self.pending_payload

    def _recv_more(self, in_frame: bool) -> None:
        if self._corked:
            self.flush()  # never wait for the peer while holding frames it waits for
        if self._hi == len(self._buf):
            n = self._hi - self._lo
            self._buf[:n] = bytes(self._mv[self._lo:self._hi])
            self._lo, self._hi = 0, n
        got = self.sock.recv_into(self._mv[self._hi:])
        if got == 0:
            if in_frame:
                raise ProtocolError("truncated frame: connection closed mid-frame")
            raise ConnectionClosed()
        self._hi += got

    def _need(self, n: int) -> None:
        while self._hi - self._lo < n:
            self._recv_more(in_frame=True)

    def read_header(self) -> tuple[dict[str, Any], int]:
        """Reads the prefix and header of the next frame; returns (header, payload length)."""
        if self.pending_payload:
            self.skip_payload()
        if self._hi == self._lo:
            self._recv_more(in_frame=False)
        self._need(PREFIX.size)
        magic, version, _flags, hlen, plen = PREFIX.unpack_from(self._buf, self._lo)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {bytes(magic)!r}")
        if version != VERSION:
            raise ProtocolError(f"unsupported protocol version {version}")
        if hlen > self.limits.max_header:
            raise ProtocolError(f"header of {hlen} bytes exceeds limit {self.limits.max_header}")
        if plen > self.limits.max_payload:
            raise ProtocolError(f"payload of {plen} bytes exceeds limit {self.limits.max_payload}")
        self._lo += PREFIX.size
        self._need(hlen)
        try:
            header = msgpack.unpackb(self._mv[self._lo:self._lo + hlen], raw=False)
        except Exception as exc:  # msgpack raises several types on garbage
            raise ProtocolError(f"undecodable header: {exc}") from None
        self._lo += hlen
        if not isinstance(header, dict):
            raise ProtocolError("header is not a map")
        self.pending_payload = plen
        return header, plen

    def read_payload_into(self, target: memoryview) -> None:
        """Reads the whole pending payload into ``target`` (its length must match)."""
        if len(target) != self.pending_payload:
            raise ProtocolError(f"payload length {self.pending_payload} != expected {len(target)}")
        self.read_payload_part(target)

    def read_payload_part(self, target: memoryview) -> None:
        """Reads the next ``len(target)`` bytes of the pending payload into ``target``
        (a payload that carries several values end to end is read value by value)."""
        n = len(target)
        if n > self.pending_payload:
            raise ProtocolError(f"payload part of {n} bytes exceeds the {self.pending_payload} left")
        take = min(self._hi - self._lo, n)
        if take:
            target[:take] = self._mv[self._lo:self._lo + take]
            self._lo += take
        filled = take
        if filled < n:
            self.flush()
        while filled < n:
            got = self.sock.recv_into(target[filled:])
            if got == 0:
                raise ProtocolError("truncated frame: connection closed mid-payload")
            filled += got
        self.pending_payload -= n

    def read_payload(self) -> bytearray:
        out = bytearray(self.pending_payload)
        self.read_payload_into(memoryview(out))
        return out

    def skip_payload(self) -> None:
        remaining = self.pending_payload
        while remaining:
            if self._hi == self._lo:
                self._recv_more(in_frame=True)
            take = min(self._hi - self._lo, remaining)
            self._lo += take
            remaining -= take
        self.pending_payload = 0

    # -- sending -----------------------------------------------------------------------
    def send(self, header: dict[str, Any], buffers: Sequence[Any] = (), cork: bool = False) -> None:
        """Sends one frame. ``cork``: a small frame is copied and held back, to leave with the
        next frame sent or before the next wait for input (replies to pipelined requests
        then reach the peer in one system call); the buffers may be reused at once."""
        hb = pack_header(header)
        views = [_bytes_view(b) for b in buffers]
        plen = sum(v.nbytes for v in views)
        head = PREFIX.pack(MAGIC, VERSION, 0, len(hb), plen) + hb
        if plen <= _SMALL_SEND:
            frame = b"".join([head, *views]) if views else head
            if cork:
                self._corked.append(frame)
                return
            if self._corked:
                self._corked.append(frame)
                self.flush()
                return
            self.sock.sendall(frame)
            return
        self.flush()
        self.sock.sendall(head)
        for v in views:
            self.sock.sendall(v)

    def flush(self) -> None:
        """Sends the frames held back by ``cork``."""
        if self._corked:
            frames, self._corked = self._corked, []
            self.sock.sendall(b"".join(frames))

    def send_many(self, frames: Sequence[tuple[dict[str, Any], Sequence[Any]]]) -> None:
        """Sends several frames back to back; small ones leave in one system call."""
        pending: list[Any] = []
        size = 0
        for header, buffers in frames:
            views = [_bytes_view(b) for b in buffers]
            plen = sum(v.nbytes for v in views)
            if plen > _SMALL_SEND:
                if pending:
                    self.sock.sendall(b"".join(pending))
                    pending, size = [], 0
                self.send(header, views)
                continue
            hb = pack_header(header)
            pending += [PREFIX.pack(MAGIC, VERSION, 0, len(hb), plen), hb, *views]
            size += plen
            if size > _SMALL_SEND:
                self.sock.sendall(b"".join(pending))
                pending, size = [], 0
        if pending:
            self.sock.sendall(b"".join(pending))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def host_identity() -> str:
    """Same value for every process of one booted machine: decides who may map the arena."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "no-boot-id"
    return f"{socket.gethostname()}/{boot}"


def check_token(expected: str | None, given: Any) -> bool:
    """Constant-time token check; no expected token means the worker runs insecure."""
    if expected is None:
        return True
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_address(address: str) -> tuple[str, int]:
    """Parses ``host:port`` (IPv6 as ``[::1]:port``) and names the bad part on error."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"address must be 'host:port', got {address!r}")
    host, _, port_s = address.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"address port must be an integer, got {port_s!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"address port out of range: {port}")
    return host or "127.0.0.1", port
