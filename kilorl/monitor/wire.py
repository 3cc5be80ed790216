"""Snapshots from role processes to their node exporter: framing and validation.

A frame is a 4-byte big-endian length followed by one msgpack map (never pickle: these
bytes come from a socket). A snapshot names its sender (role, rank, node, pid) and
carries the sender's metric families as plain lists. :func:`decode_snapshot` checks
every field and raises :class:`WireError` naming the first bad one, so the exporter can
close that one connection and keep serving everyone else.
"""

from __future__ import annotations

import math
import re
import socket
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest snapshot accepted; a role with more series than this is misconfigured."""

_HEADER = struct.Struct(">I")
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TYPES = ("counter", "gauge", "histogram")
VERSION = 1


class WireError(ValueError):
    """A malformed frame or snapshot; the message names the offending field."""


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    help: str
    samples: list[tuple[str, dict[str, str], float]]


@dataclass(frozen=True)
class Snapshot:
    role: str
    rank: int
    node: str
    pid: int
    time: float
    families: list[Family]

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.role, str(self.rank), self.node)


def encode_snapshot(snap: Snapshot) -> bytes:
    body = msgpack.packb(
        {
            "v": VERSION,
            "role": snap.role,
            "rank": snap.rank,
            "node": snap.node,
            "pid": snap.pid,
            "time": snap.time,
            "families": [[f.name, f.type, f.help, [list(s) for s in f.samples]] for f in snap.families],
        },
        use_bin_type=True,
    )
    if len(body) > MAX_FRAME_BYTES:
        raise WireError(f"snapshot of {len(body)} bytes exceeds MAX_FRAME_BYTES={MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def _field(d: dict, key: str, typ: type | tuple[type, ...]) -> Any:
    if key not in d:
        raise WireError(f"snapshot field {key!r} is missing")
    v = d[key]
    if not isinstance(v, typ) or isinstance(v, bool):
        raise WireError(f"snapshot field {key!r} has type {type(v).__name__}")
    return v


def _sample(fam: str, raw: Any) -> tuple[str, dict[str, str], float]:
    if not (isinstance(raw, list) and len(raw) == 3):
        raise WireError(f"family {fam!r}: a sample must be [name, labels, value]")
    name, labels, value = raw
    if not (isinstance(name, str) and _NAME.match(name) and name.startswith(fam)):
        raise WireError(f"family {fam!r}: bad sample name {name!r}")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and _LABEL.match(k) and isinstance(v, str) for k, v in labels.items()
    ):
        raise WireError(f"family {fam!r}: sample labels must map label names to strings")
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise WireError(f"family {fam!r}: sample value must be a number, got {value!r}")
    return name, labels, float(value)


def decode_snapshot(body: bytes) -> Snapshot:
    try:
        d = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as e:
        raise WireError(f"frame is not msgpack: {e}") from None
    if not isinstance(d, dict):
        raise WireError("snapshot must be a map")
    if d.get("v") != VERSION:
        raise WireError(f"snapshot field 'v' must be {VERSION}, got {d.get('v')!r}")
    families = []
    for raw in _field(d, "families", list):
        if not (isinstance(raw, list) and len(raw) == 4):
            raise WireError("snapshot field 'families': each must be [name, type, help, samples]")
        name, typ, help_, samples = raw
        if not (isinstance(name, str) and _NAME.match(name)):
            raise WireError(f"snapshot field 'families': bad family name {name!r}")
        if typ not in _TYPES:
            raise WireError(f"family {name!r}: type must be one of {_TYPES}, got {typ!r}")
        if not isinstance(help_, str) or not isinstance(samples, list):
            raise WireError(f"family {name!r}: help must be a string and samples a list")
        families.append(Family(name, typ, help_, [_sample(name, s) for s in samples]))
    return Snapshot(
        role=_field(d, "role", str),
        rank=_field(d, "rank", int),
        node=_field(d, "node", str),
        pid=_field(d, "pid", int),
        time=float(_field(d, "time", (int, float))),
        families=families,
    )


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            if buf:
                raise WireError(f"connection closed inside a frame ({len(buf)} of {n} bytes)")
            return None
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes | None:
    """The next frame's body, or None at a clean end of stream."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    if n > MAX_FRAME_BYTES:
        raise WireError(f"frame length {n} exceeds MAX_FRAME_BYTES={MAX_FRAME_BYTES}")
    body = _recv_exact(sock, n)
    if body is None:
        raise WireError("connection closed after a frame header")
    return body
