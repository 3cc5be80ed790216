"""Byte-range reads and ``describe``: the primitives parameter resharding is built on.

One real worker for the local behaviour; a three-worker mesh (built-in metastore and a
real etcd) for remote ranges, where the holder's served-byte counter shows that only
the asked bytes moved.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.store import InvalidRequest, KeyNotFound
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)


def test_get_range_returns_exactly_the_bytes_asked_for(client):
    data = np.random.default_rng(1).integers(0, 256, 3 * 1024 * 1024 + 5, dtype=np.uint8)
    client.set("blob", data.tobytes())
    for offset, length in [(0, 10), (1_000_003, 2 * 1024 * 1024), (len(data) - 7, 7), (123, 0)]:
        got = client.get_range("blob", offset, length)
        assert bytes(got) == data[offset:offset + length].tobytes()


def test_large_local_range_is_a_read_only_view_of_the_arena(client):
    client.set("big", np.arange(4 * 1024 * 1024, dtype=np.uint8))
    view = client.get_range("big", 1024 * 1024, 1024 * 1024)
    assert view.readonly
    arr = np.frombuffer(view, dtype=np.uint8)
    assert arr.base is not None and not arr.flags.owndata  # a view, not a received copy
    assert arr[0] == (1024 * 1024) % 256
    with pytest.raises((TypeError, ValueError)):
        view[0] = 1


def test_range_outside_the_object_names_offset_and_length(client):
    client.set("small", b"0123456789")
    with pytest.raises(InvalidRequest, match="offset/length"):
        client.get_range("small", 8, 3)
    with pytest.raises(InvalidRequest, match="offset/length"):
        client.get_range("small", -1, 2)
    with pytest.raises(KeyNotFound):
        client.get_range("absent", 0, 1)


def test_describe_gives_each_tensor_dtype_shape_and_byte_offset(client):
    value = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5, dtype=torch.int64),
             "raw": b"xyz"}
    client.set("params", value)
    d = client.describe("params")
    assert d["type"] == "dict"
    w, b = d["entries"]["w"], d["entries"]["b"]
    assert (w["dtype"], w["shape"], w["nbytes"]) == ("float32", [3, 4], 48)
    assert (b["dtype"], b["shape"], b["nbytes"]) == ("int64", [5], 40)
    # The offsets locate the tensors' bytes: a row slice read by range equals the tensor's row.
    row = client.get_range("params", w["offset"] + 4 * 4, 4 * 4)
    assert torch.equal(torch.frombuffer(bytearray(row), dtype=torch.float32), value["w"][1])
    assert bytes(client.get_range("params", d["entries"]["raw"]["offset"], 3)) == b"xyz"
    assert client.describe("params")["size"] >= b["offset"] + 40


def test_describe_of_plain_values_gives_size_and_type(client):
    client.set("s", "hello")
    client.set("a", np.zeros((2, 3), dtype=np.float16))
    assert client.describe("s") == {"type": "str", "size": 5}
    a = client.describe("a")
    assert (a["type"], a["dtype"], a["shape"], a["size"]) == ("ndarray", "<f2", [2, 3], 12)
    with pytest.raises(KeyNotFound):
        client.describe("nothing")


@pytest.fixture(params=["builtin", "etcd"])
def metastore(request) -> str:
    if request.param == "builtin":
        return "builtin"
    return request.getfixturevalue("etcd_server").url


def served(client) -> int:
    return client.stats()["cluster"]["counters"]["bytes_served"]


@pytest.mark.timeout(180)
def test_remote_range_moves_only_the_asked_bytes_from_the_holder(cluster_of, metastore):
    """1 MiB at offset 100 MiB of a 256 MiB object: the holder serves at most 1.1 MiB."""
    cluster = cluster_of(metastore, shm="400MiB")
    a, b, _ = cluster.start(3)
    ca, cb = a.client(), b.client()
    size, offset, length = 256 * 1024 * 1024, 100 * 1024 * 1024, 1024 * 1024
    value = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
    ca.set("weights", value)
    before = served(ca)
    got = cb.get_range("weights", offset, length)
    moved = served(ca) - before
    assert bytes(got) == value[offset:offset + length].tobytes()
    assert 0 < moved <= 1.1 * 1024 * 1024, moved
    assert cb.stats()["cluster"]["replicas"] == 0  # no whole copy was pulled to the reader
    d = cb.describe("weights")  # remote describe: metadata only, no bytes move
    assert (d["type"], d["size"]) == ("ndarray", size)
    assert served(ca) - before == moved

