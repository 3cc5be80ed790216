"""HeteroClient and DsTensorClient against real workers (with and without a device tier)."""

from __future__ import annotations

import pytest
import torch

from kilorl.store import InvalidRequest
from kilorl.store.yuanrong import Blob, DeviceBlobList, FutureTimeoutException, HeteroClient
from kilorl.store.yuanrong.ds_tensor_client import CopyRange, DsTensorClient
from kilorl.store.yuanrong.errors import DsUnsupported
from kilorl.store.yuanrong.hetero_client import Future
from kilorl.store.yuanrong.kv_client import ExistenceOpt, SetParam


@pytest.fixture(params=["host-only", "device-tier"])
def hetero(request, workers, tmp_path):
    args = ["--shm-size", "16MiB"]
    if request.param == "device-tier":
        args += ["--device", "cpu", "--device-size", "8MiB"]
    w = workers(*args)
    client = HeteroClient("127.0.0.1", w.port, token=w.token)
    client.init()
    yield client
    client.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without CUDA")
def test_raw_device_pointers_are_refused_clearly_without_cuda():
    with pytest.raises(RuntimeError, match="CUDA") as info:
        Blob(0x7F0000000000, 64)
    assert isinstance(info.value, DsUnsupported) and isinstance(info.value, InvalidRequest)
    with pytest.raises(TypeError):
        Blob("ptr", 4)
    with pytest.raises(RuntimeError, match="contiguous"):
        Blob(torch.zeros(4, 4).t())


def test_mset_d2h_then_mget_h2d_round_trips_several_blobs(hetero):
    src = [torch.randn(32, 8), torch.arange(10)]
    hetero.mset_d2h(["k"], [DeviceBlobList(0, [Blob(t) for t in src])])
    dst = [torch.empty(32, 8), torch.empty(10, dtype=torch.int64)]
    assert hetero.mget_h2d(["k"], [DeviceBlobList(0, [Blob(t) for t in dst])], 0) == []
    assert all(torch.equal(a, b) for a, b in zip(src, dst))
    failed, infos = hetero.get_meta_info(["k", "absent"], False)
    assert failed == ["absent"] and infos[0].blob_size_list == [32 * 8 * 4, 10 * 8]
    param = SetParam()
    param.existence = ExistenceOpt.NX
    with pytest.raises(RuntimeError, match="already exist"):
        hetero.mset_d2h(["k"], [DeviceBlobList(0, [Blob(src[0])])], param)


def test_src_offset_reads_from_inside_the_stored_bytes(hetero):
    hetero.dev_mset(["r"], [DeviceBlobList(0, [Blob(torch.arange(16, dtype=torch.uint8))])])
    dst = torch.zeros(4, dtype=torch.uint8)
    assert hetero.dev_mget(["r"], [DeviceBlobList(0, [Blob(dst)], src_offset=10)], 0) == []
    assert dst.tolist() == [10, 11, 12, 13]


def test_dev_mset_uses_the_device_tier_when_the_worker_has_one(hetero):
    t = torch.randn(64)
    assert hetero.dev_mset(["d"], [DeviceBlobList(0, [Blob(t)])]) == []
    tier = hetero.store.locate("d")["tier"]
    assert tier == ("device" if "device" in hetero.store.stats()["tiers"] else tier)
    out = torch.empty(64)
    assert hetero.dev_mget(["d", "gone"], [DeviceBlobList(0, [Blob(out)])] * 2, 0) == ["gone"]
    assert torch.equal(out, t)
    wrong = DeviceBlobList(0, [Blob(torch.empty(65))])
    with pytest.raises(RuntimeError, match="every key"):
        hetero.dev_mget(["d"], [wrong], 0)
    assert hetero.dev_delete(["d", "gone"]) == [] and hetero.exist(["d"]) == [False]


def test_async_calls_return_futures_of_the_failed_keys(hetero):
    t = torch.ones(8)
    fut = hetero.async_mset_d2h(["a"], [DeviceBlobList(0, [Blob(t)])])
    assert isinstance(fut, Future) and fut.get(5000) == []
    out = torch.zeros(8)
    assert hetero.async_mget_h2d(["a"], [DeviceBlobList(0, [Blob(out)])], 0).get() == []
    assert torch.equal(out, t)
    (sub,) = hetero.dev_subscribe(["pub"], [DeviceBlobList(0, [Blob(out)])])
    with pytest.raises(FutureTimeoutException):
        sub.get(timeout_ms=50)  # nothing published yet
    (pub,) = hetero.dev_publish(["pub"], [DeviceBlobList(0, [Blob(torch.full((8,), 3.0))])])
    assert pub.get() == [] and sub.get() == []
    assert out.tolist() == [3.0] * 8 and hetero.exist(["pub"]) == [False]  # subscribe consumes
    assert hetero.async_dev_delete(["a"]).get() == []


def test_dev_mget_into_tensor_assembles_ranges_of_several_objects(workers):
    w = workers("--shm-size", "16MiB")
    client = DsTensorClient("127.0.0.1", w.port, 0, token=w.token)
    client.init()
    client.dev_mset(["x", "y"], [torch.arange(8, dtype=torch.uint8), torch.arange(100, 108, dtype=torch.uint8)])
    target = torch.zeros(6, dtype=torch.uint8)
    failed = client.dev_mget_into_tensor(["x", "y"], target, [CopyRange(2, 0, 3), CopyRange(5, 3, 3)])
    assert failed == [] and target.tolist() == [2, 3, 4, 105, 106, 107]
    with pytest.raises(RuntimeError, match="do not match"):
        client.dev_mget_into_tensor(["x"], target, [])
    with pytest.raises(RuntimeError, match="does not fit"):
        client.dev_mget_into_tensor(["x"], target, [CopyRange(0, 4, 3)])
    back = [torch.empty(8, dtype=torch.uint8)]
    assert client.mget_h2d(["x"], back) == [] and back[0].tolist() == list(range(8))
    client.close()


def test_blob_lists_can_be_built_up_and_deleted_locally(hetero):
    bl = DeviceBlobList(0, [])
    bl.append_blob(Blob(torch.arange(4, dtype=torch.uint8)))
    blob = Blob(torch.zeros(8, dtype=torch.uint8), 2)
    blob.set_size(4)
    blob.set_dev_ptr(torch.arange(10, 14, dtype=torch.uint8))
    bl.append_blob(blob)
    bl.set_dev_idx(1)
    assert len(bl.get_blob_list()) == 2 and bl.dev_idx == 1
    key = hetero.generate_key("h-")
    assert key.startswith("h-") and hetero.dev_mset([key], [bl]) == []
    out = torch.zeros(3, dtype=torch.uint8)
    dst = DeviceBlobList(0, [Blob(out)])
    dst.set_src_offset(5)
    assert hetero.dev_mget([key], [dst], 0) == [] and out.tolist() == [11, 12, 13]
    with pytest.raises(RuntimeError, match="within the tensor"):
        blob.set_size(100)
    assert hetero.dev_local_delete([key]) == [] and hetero.exist([key]) == [False]
    with pytest.raises(RuntimeError, match="should not be empty"):
        hetero.dev_mset([], [])


def test_tensor_client_async_calls_and_deletes(workers):
    w = workers("--shm-size", "16MiB")
    client = DsTensorClient("127.0.0.1", w.port, 0, token=w.token)
    client.init()
    src = torch.randn(5, 3)
    assert client.async_mset_d2h(["t"], [src]).get() == []
    out = torch.empty(5, 3)
    assert client.async_mget_h2d(["t"], [out]).get() == [] and torch.equal(out, src)
    assert client.dev_mget(["t"], [torch.empty(5, 3)]) == []
    assert client.exist(["t", "u"]) == [True, False]
    assert client.delete(["t"]) == [] and client.exist(["t"]) == [False]
    client.dev_mset(["v"], [src])
    assert client.async_dev_delete(["v"]).get() == [] and client.dev_delete(["v"]) == []
    with pytest.raises(RuntimeError, match="torch tensors"):
        client.dev_mset(["v"], [b"bytes"])
    client.close()
