"""The openYuanrong-style facade against a real worker."""

from __future__ import annotations

import pytest
import torch

from kilorl.store import DsClient, KeyNotFound
from kilorl.store.facade import Blob, DeviceBlobList, WriteMode


@pytest.mark.parametrize("with_device", [True, False])
def test_kv_and_hetero(workers, tmp_path, with_device):
    args = ["--shm-size", "16MiB", "--l2-dir", str(tmp_path / "l2")]
    if with_device:
        args += ["--device", "cpu", "--device-size", "8MiB"]
    w = workers(*args)
    ds = DsClient("127.0.0.1", w.port, token=w.token).init()
    kv = ds.kv()
    kv.set("a", b"alpha")
    kv.set("b", "beta", write_mode=WriteMode.WRITE_THROUGH_L2_CACHE)
    kv.mset(["c", "d"], [b"c", b"d"])
    assert kv.get(["a", "b", "c", "d"], convert_to_str=True) == ["alpha", "beta", "c", "d"]
    assert kv.exist(["a", "zz"]) == [True, False]
    assert kv.delete(["a", "zz"]) == ["zz"]
    with pytest.raises(KeyNotFound):
        kv.get(["a"])

    hetero = ds.hetero()
    src = [DeviceBlobList(0, [Blob(torch.randn(128, 64)), Blob(torch.arange(10))]),
           DeviceBlobList(0, [Blob(torch.ones(3))])]
    assert hetero.dev_mset(["k1", "k2"], src) == []
    if with_device:
        assert ds.native().locate("k1")["tier"] == "device"
    dst = [DeviceBlobList(0, [Blob(torch.empty(128, 64)), Blob(torch.empty(10, dtype=torch.int64))]),
           DeviceBlobList(0, [Blob(torch.empty(3))])]
    assert hetero.dev_mget(["k1", "k2"], dst) == []
    for s, d in zip(src, dst):
        for sb, db in zip(s.blob_list, d.blob_list):
            assert torch.equal(sb.tensor, db.tensor)
    wrong_shape = [DeviceBlobList(0, [Blob(torch.empty(5))])]
    assert hetero.dev_mget(["k2"], wrong_shape) == ["k2"]
    assert hetero.dev_delete(["k1", "nope"]) == ["nope"]
    assert hetero.dev_mget(["k1"], dst[:1]) == ["k1"]
    with pytest.raises(Exception, match="torch tensor"):
        Blob(12345)
    ds.shutdown()
