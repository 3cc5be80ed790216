"""KVClient against a real worker: construction, value types, errors, and every call."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kilorl.store import ConnectionLost, InvalidRequest, KeyNotFound, StoreClient
from kilorl.store.yuanrong import KVClient, ObjectClient, WriteMode
from kilorl.store.yuanrong.errors import DsKeyNotFound, DsTimeout, DsTypeError
from kilorl.store.yuanrong.kv_client import ExistenceOpt, ReadOnlyBuffer, ReadParam, StateValueBuffer


def test_kvclient_is_built_directly_and_connects_in_init(yr_worker):
    kv = KVClient("127.0.0.1", yr_worker.port, token=yr_worker.token)
    assert not kv.health_check().is_ok()
    with pytest.raises(RuntimeError, match="Not ready"):
        kv.set("k", b"v")
    kv.init()
    assert kv.health_check().is_ok()
    kv.close()


def test_empty_host_and_port_come_from_the_environment(yr_worker, monkeypatch):
    monkeypatch.setenv("DATASYSTEM_HOST", "127.0.0.1")
    monkeypatch.setenv("DATASYSTEM_PORT", str(yr_worker.port))
    kv = KVClient(host="", port=0, connect_timeout_ms=5000, token=yr_worker.token)
    kv.init()
    kv.set("env", "ok")
    assert kv.get(["env"]) == [b"ok"]
    kv.close()


def test_unreachable_worker_raises_a_runtime_error_that_is_also_connection_lost():
    kv = KVClient("127.0.0.1", 1, connect_timeout_ms=2000)
    with pytest.raises(RuntimeError) as info:
        kv.init()
    assert isinstance(info.value, ConnectionLost)


def test_str_values_come_back_as_bytes_and_misses_as_none(connect):
    kv = connect(KVClient)
    kv.set("s", "héllo")
    kv.set("b", bytearray(b"\x00\x01"))
    assert kv.get(["s", "b", "nope"]) == ["héllo".encode(), b"\x00\x01", None]
    assert all(type(v) is bytes for v in kv.get(["s", "b"]))
    assert kv.get(["s", "nope"], True) == ["héllo", None]


def test_a_read_where_every_key_misses_raises_key_not_found_as_runtime_error(connect):
    kv = connect(KVClient)
    with pytest.raises(RuntimeError, match="Key not found") as info:
        kv.get(["a", "b"])
    assert isinstance(info.value, KeyNotFound) and isinstance(info.value, DsKeyNotFound)


def test_sub_timeout_waits_for_a_key_written_meanwhile(connect):
    kv = connect(KVClient)
    writer = connect(KVClient)
    threading.Timer(0.2, lambda: writer.set("late", b"x")).start()
    t0 = time.monotonic()
    assert kv.get(["late"], False, 5000) == [b"x"]
    assert 0.1 < time.monotonic() - t0 < 4.5


def test_bad_argument_types_raise_type_error_naming_the_field(connect):
    kv = connect(KVClient)
    with pytest.raises(TypeError, match="key") as info:
        kv.set(1, b"v")
    assert isinstance(info.value, InvalidRequest)
    with pytest.raises(TypeError, match="val"):
        kv.set("k", 12)
    with pytest.raises(TypeError, match="keys"):
        kv.get("k")
    with pytest.raises(TypeError, match="ttl_second"):
        kv.set("k", b"v", WriteMode.NONE_L2_CACHE, -1)
    with pytest.raises(TypeError, match="ttl_second"):
        kv.set("k", b"v", WriteMode.NONE_L2_CACHE, 2**32)
    with pytest.raises(TypeError, match="write_mode"):
        kv.set("k", b"v", "none")


def test_empty_keys_and_values_are_refused_as_runtime_errors(connect):
    kv = connect(KVClient)
    with pytest.raises(RuntimeError, match="objectKey should not be empty"):
        kv.set("", b"v")
    with pytest.raises(RuntimeError, match="dataSize value should be bigger than zero"):
        kv.set("k", "")
    with pytest.raises(RuntimeError, match="Invalid parameter"):
        kv.exist([])
    with pytest.raises(RuntimeError, match="exceed 100000"):
        kv.exist([f"k{i}" for i in range(100001)])


def test_ttl_expires_values_and_expire_reports_missing_keys(connect):
    kv = connect(KVClient)
    kv.set("short", b"1", WriteMode.NONE_L2_CACHE, 1)
    kv.set("long", b"2", WriteMode.NONE_L2_CACHE, 100)
    assert kv.expire(["long", "absent"], 1) == ["absent"]
    time.sleep(1.3)
    assert kv.exist(["short", "long"]) == [False, False]
    kv.set("kept", b"3", WriteMode.NONE_L2_CACHE, 1)
    assert kv.expire(["kept"], 0) == []  # 0 clears the TTL
    time.sleep(1.3)
    assert kv.get(["kept"]) == [b"3"]


def test_mset_returns_failed_keys_and_nx_leaves_existing_values(connect):
    kv = connect(KVClient)
    assert kv.mset(["a", "b"], ["1", b"2"]) == []
    assert kv.mset(["a", "c"], [b"new", b"3"], WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX) == ["a"]
    assert kv.get(["a", "b", "c"]) == [b"1", b"2", b"3"]
    with pytest.raises(RuntimeError, match="vals"):
        kv.mset(["a"], [b"1", b"2"])


def test_msettx_with_nx_writes_nothing_when_one_key_exists(connect):
    kv = connect(KVClient)
    kv.set("x", b"old")
    with pytest.raises(RuntimeError, match="already exist"):
        kv.msettx(["x", "y"], [b"1", b"2"], WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX)
    assert kv.exist(["x", "y"]) == [True, False]
    kv.msettx(["y", "z"], [b"1", b"2"], WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX)
    assert kv.get(["y", "z"]) == [b"1", b"2"]


def test_delete_returns_no_failures_for_missing_keys_and_exist_is_per_key(connect):
    kv = connect(KVClient)
    kv.set("k1", b"v")
    assert kv.exist(["k1", "k2"]) == [True, False]
    assert kv.delete(["k1", "k2"]) == []
    assert kv.exist(["k1"]) == [False]


def test_generated_keys_are_dashed_uuids_and_set_value_returns_its_key(connect):
    kv = connect(KVClient)
    key = kv.generate_key()
    assert len(key) == 36 and key.count("-") == 4
    assert kv.generate_key("p/").startswith("p/")
    k2 = kv.set_value("payload")
    assert kv.get([k2], True) == ["payload"]


def test_write_back_evict_mode_reaches_l2(connect):
    kv = connect(KVClient)
    kv.set("wb", b"v" * 100, WriteMode.WRITE_BACK_L2_CACHE_EVICT)
    kv.set("wt", b"v", WriteMode.WRITE_THROUGH_L2_CACHE)
    assert kv.store.locate("wt")["l2_durable"]
    deadline = time.monotonic() + 10
    while not kv.store.locate("wb")["l2_durable"]:
        assert time.monotonic() < deadline, "write-back never reached L2"
        time.sleep(0.05)


def test_mcreate_buffers_are_filled_in_place_and_read_back_zero_copy(connect):
    kv = connect(KVClient)
    bufs = kv.mcreate(["m1", "m2"], [100, 200 * 1024], WriteMode.NONE_L2_CACHE, 60)
    assert [b.GetSize() for b in bufs] == [100, 200 * 1024]
    bufs[0].MutableData()[:5] = b"hello"
    np.asarray(bufs[1])[:] = 7
    kv.mset_buffer(bufs)
    got = kv.get_buffers(["m1", "m2", "missing"], timeout_ms=0)
    assert isinstance(got[0], StateValueBuffer) and got[2] is None
    assert bytes(memoryview(got[0])[:5]) == b"hello" and got[0].GetSize() == 100
    assert int(np.asarray(got[1]).sum()) == 7 * 200 * 1024
    assert not got[1].flags.writeable  # a read-only view of the worker's arena
    with pytest.raises(RuntimeError, match="read-only"):
        got[1].MutableData()
    with pytest.raises(RuntimeError, match="bigger than zero"):
        kv.mcreate(["z"], [0])


def test_read_only_buffers_and_byte_range_reads(connect):
    kv = connect(KVClient)
    big = bytes(range(256)) * 4096  # 1 MiB: served from the arena
    kv.set("big", big)
    kv.set("small", b"abc")
    ro = kv.get_read_only_buffers(["big", "small", "nope"], 0)
    assert isinstance(ro[0], ReadOnlyBuffer) and ro[2] is None
    view = ro[0].immutable_data(with_latch=True, timeout_sec=1)
    assert view.readonly and view.tobytes() == big
    parts = kv.read([ReadParam("big", 1000, 24), ReadParam(key="small", offset=1, size=2)])
    assert parts[0].immutable_data().tobytes() == big[1000:1024]
    assert parts[1].immutable_data().tobytes() == b"bc"
    with pytest.raises(RuntimeError, match="is outside"):
        kv.read([ReadParam("small", 2, 5)])


def test_a_write_latch_held_by_an_object_client_blocks_latched_reads(connect):
    kv = connect(KVClient)
    oc = connect(ObjectClient)
    kv.set("shared", b"x" * 1000)
    (buf,) = oc.get(["shared"], 100)
    buf.wlatch(timeout_sec=1)
    ro = kv.get_read_only_buffers(["shared"], 0)[0]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="latch") as info:
        ro.immutable_data(with_latch=True, timeout_sec=1)
    assert isinstance(info.value, DsTimeout) and time.monotonic() - t0 >= 0.9
    buf.unwlatch()
    assert ro.immutable_data(with_latch=True, timeout_sec=1).tobytes() == b"x" * 1000


def test_values_written_by_native_kilorl_code_read_as_bytes(connect, yr_worker):
    kv = connect(KVClient)
    native = StoreClient(yr_worker.address, token=yr_worker.token)
    native.set("arr", np.arange(4, dtype=np.int32))
    native.set("txt", "native")
    assert kv.get(["arr", "txt"]) == [np.arange(4, dtype=np.int32).tobytes(), b"native"]
    native.close()


def test_write_modes_needing_l2_are_refused_on_a_worker_without_one(workers):
    w = workers("--shm-size", "16MiB")
    kv = KVClient("127.0.0.1", w.port, token=w.token)
    kv.init()
    with pytest.raises(RuntimeError, match="L2") as info:
        kv.set("k", b"v", WriteMode.WRITE_THROUGH_L2_CACHE)
    assert isinstance(info.value, InvalidRequest)
    with pytest.raises(DsTypeError):
        KVClient("127.0.0.1", "31501")
    kv.close()


def test_large_values_come_back_as_owned_bytes_equal_to_what_was_set(connect):
    kv = connect(KVClient)
    value = np.random.default_rng(0).integers(0, 256, 40 << 20, dtype=np.uint8).tobytes()
    kv.set("large", value)
    (got,) = kv.get(["large"])
    assert type(got) is bytes and got == value and hash(got) == hash(value)
    kv.delete(["large"])
    assert got == value  # owned: unaffected by the object going away
