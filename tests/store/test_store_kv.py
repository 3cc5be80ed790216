"""KV round trips against a real worker process: every value type, both transports."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from store_helpers import run_python, wait_until

from kilorl.store import InvalidRequest, KeyNotFound, StoreTimeout

VALUES = {
    "bytes-small": b"hello world",
    "bytes-empty": b"",
    "bytes-large": bytes(range(256)) * 4096,  # 1 MiB
    "str": "grüße ✓",
    "np-f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "np-i64-large": np.arange(300_000, dtype=np.int64),
    "np-bool": np.array([True, False, True]),
    "np-empty": np.zeros((0, 5), dtype=np.float64),
    "np-noncontig": np.arange(100, dtype=np.int16).reshape(10, 10)[:, ::3],
    "torch-f32": torch.randn(5, 7),
    "torch-bf16": torch.randn(64, 1024).to(torch.bfloat16),
    "torch-int": torch.arange(10, dtype=torch.int32),
    "state-dict": {"layer.w": torch.randn(256, 128), "layer.b": torch.zeros(128), "step": np.array([7]),
                   "tag": b"v1"},
}


def assert_same(expected, got):
    if isinstance(expected, (bytes, bytearray)):
        assert bytes(got) == expected
    elif isinstance(expected, str):
        assert got == expected
    elif isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected)
    elif isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.equal(got, expected)
    else:
        assert set(got) == set(expected)
        for k in expected:
            assert_same(expected[k], got[k])


@pytest.mark.parametrize("mode", ["zero-copy", "inline-unix", "tcp"])
def test_round_trip_every_type(worker, mode):
    kw = {"zero-copy": {}, "inline-unix": {"zero_copy": False}, "tcp": {"zero_copy": False, "use_unix_socket": False}}
    with worker.client(**kw[mode]) as c:
        assert c.transport == ("tcp" if mode == "tcp" else "unix")
        assert (c.arena is not None) == (mode == "zero-copy")
        for key, value in VALUES.items():
            c.set(key, value)
        for key, value in VALUES.items():
            assert_same(value, c.get(key))
        got = c.mget(list(VALUES) + ["missing"])
        assert got[-1] is None
        for value, g in zip(VALUES.values(), got):
            assert_same(value, g)


def test_values_written_by_one_process_read_by_another(worker, client):
    client.set("from-parent", np.arange(50_000, dtype=np.float64))
    code = f"""
import numpy as np
from kilorl.store import StoreClient
c = StoreClient({worker.address!r}, token={worker.token!r})
a = c.get("from-parent")
assert np.array_equal(a, np.arange(50_000, dtype=np.float64))
c.set("from-child", {{"x": np.full(70_000, 3, dtype=np.int32)}})
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(client.get("from-child")["x"], np.full(70_000, 3, dtype=np.int32))


def test_delete_exists_keys_and_overwrite(client):
    client.mset({"a/1": b"1", "a/2": b"2", "b/1": b"3"})
    assert client.keys("a/") == ["a/1", "a/2"]
    assert client.exists("a/1") and not client.exists("nope")
    assert client.delete("a/1", "nope") == 1
    assert not client.exists("a/1")
    with pytest.raises(KeyNotFound):
        client.get("a/1")
    client.set("b/1", b"new")
    assert bytes(client.get("b/1")) == b"new"


def test_ttl_expiry_and_expire(client):
    client.set("short", b"x", ttl=0.3)
    client.set("long", b"y")
    assert client.exists("short")
    wait_until(lambda: not client.exists("short"), timeout=5, what="ttl expiry")
    with pytest.raises(KeyNotFound):
        client.get("short")
    assert client.expire("long", 0.2)
    wait_until(lambda: "long" not in client.keys(), timeout=5, what="expire()")
    assert not client.expire("long", 1.0)
    # Expired objects give their memory back (the sweeper runs without any reader).
    client.set("big", np.zeros(4 << 20, dtype=np.uint8), ttl=0.2)
    wait_until(lambda: client.stats()["tiers"]["dram"]["used"] < 1 << 20, timeout=5, what="expired memory freed")


def test_get_waits_for_key_from_another_process(worker, client):
    with pytest.raises(StoreTimeout):
        client.get("later", timeout=0.2)
    code = f"""
import time
from kilorl.store import StoreClient
time.sleep(0.3)
StoreClient({worker.address!r}, token={worker.token!r}).set("later", b"arrived")
"""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert bytes(client.get("later", timeout=30)) == b"arrived"
    finally:
        p.wait(30)


def test_invalid_input_names_the_field(client):
    with pytest.raises(InvalidRequest, match="value"):
        client.set("obj", object())
    with pytest.raises(InvalidRequest, match="value"):
        client.set("objarr", np.array([object()], dtype=object))
    with pytest.raises(InvalidRequest, match="ttl"):
        client.set("k", b"x", ttl=-1)
    with pytest.raises(InvalidRequest, match="tier"):
        client.set("k", b"x", tier="device")  # this worker has no device tier
    with pytest.raises(InvalidRequest, match="key"):
        client.set("", b"x")
    assert client.ping()  # the connection survived every error


def test_reserved_keys_are_refused(client):
    client.publish("p", version=1, value=b"v1")
    with pytest.raises(InvalidRequest, match="reserved"):
        client.set("\x00ver/p/00000000000000000002", b"forged")
    assert client.delete("\x00ver/p/00000000000000000001") == 0
    assert bytes(client.get_version("p").value) == b"v1"


def test_a_killed_worker_is_a_clear_client_error_once_the_reconnect_timeout_has_passed(workers):
    import time

    from kilorl.store import WorkerUnreachable

    w = workers("--shm-size", "8MiB")
    c = w.client(reconnect_timeout=1.0)
    c.set("k", b"v")
    w.kill9()
    t0 = time.monotonic()
    with pytest.raises(WorkerUnreachable, match=r"lost and not made again within 1s \(reconnect_timeout"):
        c.get("k")
    assert time.monotonic() - t0 >= 1.0  # it kept trying for its whole deadline, not one attempt


def test_a_client_rides_out_its_worker_restarted_on_the_same_port_and_repeats_the_operation(workers):
    import threading

    w = workers("--shm-size", "8MiB", name="first")
    c = w.client()  # the default reconnect timeout (60 s): far longer than a restart, even under load
    c.set("before", b"gone with the first worker's memory")
    port = w.port
    w.kill9()
    got: dict = {}

    def use() -> None:  # starts while nothing listens on the port: the first reconnects are refused
        try:
            c.set("after", b"written once it was back")
            got["after"] = bytes(c.get("after"))
            got["before"] = c.exists("before")
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            got["error"] = exc

    t = threading.Thread(target=use)
    t.start()
    workers("--shm-size", "8MiB", "--port", str(port), name="second")
    t.join(120)
    assert not t.is_alive() and "error" not in got, got
    assert got == {"after": b"written once it was back", "before": False}  # the restarted, empty worker
    assert c.failovers >= 1 and c.address == f"127.0.0.1:{port}"
