"""Hostile input on the wire: the worker drops that connection and keeps serving."""

from __future__ import annotations

import socket
import struct

import msgpack
import pytest
from store_helpers import wait_until

from kilorl.store import AuthError, ConfigError, InvalidRequest, WorkerConfig
from kilorl.store.wire.protocol import MAGIC, PREFIX, VERSION


def frame(header: dict, payload: bytes = b"", magic: bytes = MAGIC, plen: int | None = None) -> bytes:
    hb = msgpack.packb(header)
    return PREFIX.pack(magic, VERSION, 0, len(hb), len(payload) if plen is None else plen) + hb + payload


def raw(worker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", worker.port), timeout=10)


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the worker has closed the connection (recv returns EOF or reset)."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True


def hello(sock, token):
    sock.sendall(frame({"op": "hello", "token": token}))
    n = struct.unpack("!2sBBIQ", sock.recv(16, socket.MSG_WAITALL))
    return msgpack.unpackb(sock.recv(n[3], socket.MSG_WAITALL))


BAD_INPUTS = {
    "garbage": b"\x00\xffGET / HTTP/1.1\r\n\r\n" * 10,
    "bad-magic": frame({"op": "hello"}, magic=b"XX"),
    "4GiB-length-prefix": PREFIX.pack(MAGIC, VERSION, 0, 10, 4 * 1024**3) + b"\x80" * 10,
    "huge-header-length": PREFIX.pack(MAGIC, VERSION, 0, 2**31, 0),
    "header-not-msgpack": PREFIX.pack(MAGIC, VERSION, 0, 4, 0) + b"\xc1\xc1\xc1\xc1",
    "header-not-a-map": PREFIX.pack(MAGIC, VERSION, 0, 1, 0) + msgpack.packb(7),
    "wrong-version": PREFIX.pack(MAGIC, 99, 0, 1, 0) + b"\x80",
}


def test_bad_frames_close_only_that_connection(worker):
    good = worker.client()
    good.set("k", b"v")
    for name, data in BAD_INPUTS.items():
        s = raw(worker)
        s.sendall(data)
        assert closed_by_peer(s), name
        s.close()
        assert bytes(good.get("k")) == b"v", f"good client broken after {name}"
    assert worker.alive()
    assert "closing connection" in worker.read_log()


def test_truncated_frames(worker):
    good = worker.client()
    full = frame({"op": "hello", "token": worker.token})
    for cut in (3, 16, len(full) - 1):
        s = raw(worker)
        s.sendall(full[:cut])
        s.shutdown(socket.SHUT_WR)
        assert closed_by_peer(s)
        s.close()
        assert good.ping()
    # Truncated payload after a valid hello: the worker must release the staged region.
    s = raw(worker)
    assert hello(s, worker.token)["ok"]
    s.sendall(frame({"op": "set", "key": "t", "meta": {"k": "bytes"}}, b"x" * 1000, plen=10_000_000))
    s.shutdown(socket.SHUT_WR)
    assert closed_by_peer(s)
    s.close()
    assert not good.exists("t")
    wait_until(lambda: good.stats()["tiers"]["dram"]["used"] == 0, what="staged region freed")
    assert worker.alive()


def test_wrong_and_missing_tokens(worker):
    good = worker.client()
    for token in ("wrong", None, "", 12345, worker.token + "x"):
        s = raw(worker)
        reply = hello(s, token)
        assert reply["ok"] is False and reply["code"] == "auth"
        assert closed_by_peer(s)
        s.close()
    # Requests before hello are refused too.
    s = raw(worker)
    s.sendall(frame({"op": "get", "key": "k"}))
    assert closed_by_peer(s)
    with pytest.raises(AuthError):
        worker.client(token="nope")
    with pytest.raises(AuthError):
        worker.client(token="nope", use_unix_socket=False)
    assert good.ping() and worker.alive()


def test_many_abusive_connections_while_good_client_works(worker):
    good = worker.client()
    payload = b"z" * 100_000
    for i in range(30):
        s = raw(worker)
        s.sendall(list(BAD_INPUTS.values())[i % len(BAD_INPUTS)])
        good.set(f"k{i}", payload)
        assert bytes(good.get(f"k{i}")) == payload
        s.close()
    assert worker.alive()


def test_unknown_op_and_bad_fields_keep_connection(worker):
    s = raw(worker)
    assert hello(s, worker.token)["ok"]
    for header in ({"op": "frobnicate"}, {"op": 5}, {"op": "get"}, {"op": "get", "key": 3}, {"op": "set", "key": "k"}):
        s.sendall(frame(header, b"abc" if header.get("op") == "set" else b""))
        n = struct.unpack("!2sBBIQ", s.recv(16, socket.MSG_WAITALL))
        reply = msgpack.unpackb(s.recv(n[3], socket.MSG_WAITALL))
        assert reply["ok"] is False and reply["code"] == "invalid", header
    s.sendall(frame({"op": "ping"}))
    n = struct.unpack("!2sBBIQ", s.recv(16, socket.MSG_WAITALL))
    assert msgpack.unpackb(s.recv(n[3], socket.MSG_WAITALL))["pong"] is True


def test_bad_fields_of_range_describe_and_version_ops_are_named(worker):
    s = raw(worker)
    assert hello(s, worker.token)["ok"]
    cases = [({"op": "get_range", "key": "k", "offset": "0", "length": 1}, "offset"),
             ({"op": "get_range", "key": "k", "offset": 0}, "length"),
             ({"op": "get_range", "key": "k", "offset": -1, "length": 1}, "offset/length"),
             ({"op": "describe"}, "key"),
             ({"op": "get_version", "name": "n", "ranges": [[0]]}, "ranges[0]"),
             ({"op": "set", "ver": ["n", "one"], "meta": {"k": "bytes"}}, "ver"),
             ({"op": "keys", "prefix": 3}, "prefix"),
             ({"op": "publish"}, "items"),
             ({"op": "publish", "items": [["n", None, {"k": "bytes"}, -1]]}, "items[0]"),
             ({"op": "publish", "items": [["n", None, {"k": "bytes"}, 4]]}, "items: sizes add up to 4"),
             ({"op": "publish", "items": [["n", "one", {"k": "bytes"}, 0]]}, "items[0]"),
             ({"op": "publish", "items": [["n", None, {"k": "bytes"}, 0]], "nx": True}, "nx")]
    for header, field in cases:
        s.sendall(frame(header))
        n = struct.unpack("!2sBBIQ", s.recv(16, socket.MSG_WAITALL))
        reply = msgpack.unpackb(s.recv(n[3], socket.MSG_WAITALL))
        assert reply["ok"] is False and reply["msg"].startswith(field), (header, reply)
    s.sendall(frame({"op": "ping"}))
    n = struct.unpack("!2sBBIQ", s.recv(16, socket.MSG_WAITALL))
    assert msgpack.unpackb(s.recv(n[3], socket.MSG_WAITALL))["pong"] is True


def test_oversized_payload_limit(workers):
    w = workers("--shm-size", "16MiB", "--max-payload", "1MiB")
    good = w.client()
    for kw in ({}, {"zero_copy": False}):
        with w.client(**kw) as c:
            with pytest.raises(InvalidRequest, match="max-payload"):
                c.set("big", b"x" * (2 << 20))  # refused before sending: a clear error
            assert c.ping()
    s = raw(w)
    assert hello(s, w.token)["ok"]
    s.sendall(frame({"op": "set", "key": "big", "meta": {"k": "bytes"}}, plen=2 << 20))
    assert closed_by_peer(s)
    assert good.ping() and w.alive() and not good.exists("big")


def test_insecure_only_on_loopback():
    with pytest.raises(ConfigError, match="insecure"):
        WorkerConfig(host="0.0.0.0", insecure=True, shm_size="1MiB").resolve()
    WorkerConfig(host="127.0.0.1", insecure=True, shm_size="1MiB").resolve()
