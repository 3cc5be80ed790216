"""ObjectClient and DsClient against a real worker: buffers, refs, nesting, latches."""

from __future__ import annotations

import threading
import time

import pytest

from kilorl.store import KeyNotFound
from kilorl.store.yuanrong import Buffer, ConsistencyType, DsClient, ObjectClient
from kilorl.store.yuanrong.errors import DsTimeout


def _create(oc: ObjectClient, key: str, value: bytes, seal: bool = True, nested=None) -> Buffer:
    buf = oc.create(key, len(value), {"consistency_type": ConsistencyType.PRAM})
    buf.wlatch()
    buf.memory_copy(value)
    (buf.seal if seal else buf.publish)(nested)
    buf.unwlatch()
    return buf


def test_created_buffers_are_invisible_until_published_then_readable(connect):
    oc = connect(ObjectClient)
    buf = oc.create("o", 5)
    assert buf.get_size() == 5 and not buf.mutable_data().readonly and buf.immutable_data().readonly
    buf.memory_copy(b"abc")
    with pytest.raises(RuntimeError, match="Key not found"):
        oc.get(["o"], 0)
    buf.publish()
    assert oc.get(["o"], 0)[0].immutable_data().tobytes() == b"abc\x00\x00"
    buf.memory_copy(b"xyzzy")  # publish may be repeated
    buf.publish()
    assert oc.get(["o"], 0)[0].immutable_data().tobytes() == b"xyzzy"


def test_a_sealed_buffer_refuses_more_writes(connect):
    oc = connect(ObjectClient)
    buf = _create(oc, "sealed", b"v")
    with pytest.raises(RuntimeError, match="sealed"):
        buf.memory_copy(b"w")
    with pytest.raises(RuntimeError, match="sealed"):
        buf.seal()
    with pytest.raises(RuntimeError, match="do not fit"):
        oc.create("other", 2).memory_copy(b"toolong")


def test_get_returns_none_for_misses_and_raises_when_all_miss(connect):
    oc = connect(ObjectClient)
    oc.put("p", b"payload")
    got = oc.get(["p", "nope"], 5)
    assert got[0].immutable_data() == b"payload" and got[1] is None
    with pytest.raises(RuntimeError) as info:
        oc.get(["nope"], 5)
    assert isinstance(info.value, KeyNotFound)
    with pytest.raises(RuntimeError, match="timeout_ms"):
        oc.get(["p"], -1)
    with pytest.raises(TypeError):
        oc.put("p", "str is not accepted by ObjectClient.put")


def test_an_unset_buffer_raises_clearly():
    with pytest.raises(RuntimeError, match="create it first"):
        Buffer().get_size()


def test_global_refs_delete_an_object_when_they_fall_to_zero(connect):
    oc1, oc2 = connect(ObjectClient), connect(ObjectClient)
    assert oc1.g_increase_ref(["r"]) == [] and oc2.g_increase_ref(["r"]) == []
    _create(oc1, "r", b"data")
    assert oc1.query_global_ref_num("r") == 2
    oc1.g_decrease_ref(["r"])
    assert oc2.get(["r"], 0)[0].immutable_data() == b"data"
    assert oc2.g_decrease_ref(["r", "never-referenced"]) == []
    assert oc1.query_global_ref_num("r") == 0
    with pytest.raises(RuntimeError, match="Key not found"):
        oc2.get(["r"], 0)
    oc1.put("unreferenced", b"stays")  # an object that never had refs is not collected
    assert oc1.get(["unreferenced"], 0)[0] is not None


def test_a_parent_keeps_its_nested_children_until_it_goes(connect):
    oc = connect(ObjectClient)
    oc.g_increase_ref(["parent", "c1", "c2"])
    oc.put("c1", b"1")
    oc.put("c2", b"2")
    _create(oc, "parent", b"P", seal=False, nested=["c1", "c2"])
    oc.g_decrease_ref(["c1", "c2"])
    assert [b.immutable_data().tobytes() for b in oc.get(["parent", "c1", "c2"], 0)] == [b"P", b"1", b"2"]
    oc.g_decrease_ref(["parent"])
    with pytest.raises(RuntimeError):
        oc.get(["parent", "c1", "c2"], 0)
    with pytest.raises(TypeError, match="list of strings"):
        oc.create("x", 1).publish([1])


def test_write_latches_exclude_each_other_across_threads(connect):
    oc = connect(ObjectClient)
    buf = oc.create("latched", 4)
    buf.wlatch()
    other = oc.create("latched", 4)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        other.rlatch(timeout_sec=1)
    assert isinstance(info.value, DsTimeout) and time.monotonic() - t0 >= 0.9
    threading.Timer(0.2, buf.unwlatch).start()
    other.wlatch(timeout_sec=5)  # granted once the first writer lets go
    other.unwlatch()
    with pytest.raises(RuntimeError, match="timeout_sec"):
        buf.wlatch(timeout_sec=0)


def test_invalidate_buffer_drops_the_object(connect):
    oc = connect(ObjectClient)
    buf = _create(oc, "inv", b"v", seal=False)
    buf.invalidate_buffer()
    with pytest.raises(RuntimeError):
        oc.get(["inv"], 5)


def test_generated_object_ids_carry_the_prefix(connect):
    oc = connect(ObjectClient)
    key = oc.generate_object_id("abc")
    assert key.startswith("abc") and len(key) == 39 and key != oc.generate_object_id("abc")


def test_init_of_an_unreachable_worker_fails_fast():
    oc = ObjectClient("127.0.0.1", 1, 2000, "")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        oc.init()
    assert time.monotonic() - t0 < 3


def test_dsclient_shares_one_connection_among_its_three_clients(yr_worker):
    ds = DsClient("127.0.0.1", yr_worker.port, token=yr_worker.token)
    with pytest.raises(RuntimeError, match="Not ready"):
        ds.kv().get(["k"])
    ds.init()
    assert ds.kv().store is ds.object().store is ds.hetero().store is ds.native()
    ds.kv().set("k", "v")
    assert ds.object().get(["k"], 0)[0].immutable_data() == b"v"
    assert ds.hetero().exist(["k", "j"]) == [True, False]
    ds.shutdown()
    with pytest.raises(RuntimeError, match="Not ready"):
        ds.object().get(["k"], 0)
