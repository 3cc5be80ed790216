"""Copies that outlive their holder, and ``keys()`` over the whole mesh.

Three or four real workers; each test runs with the built-in metastore and a real etcd.
In the built-in case the head (which hosts the metastore) is never the one killed.
"""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.store import ObjectLost
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)


@pytest.fixture(params=["builtin", "etcd"])
def metastore(request) -> str:
    if request.param == "builtin":
        return "builtin"
    return request.getfixturevalue("etcd_server").url


@pytest.mark.timeout(180)
def test_a_copy_read_through_b_outlives_a_kill9_of_its_holder(cluster_of, metastore):
    cluster = cluster_of(metastore)
    _head, a, b, c = cluster.start(4)
    ca, cb, cc = a.client(), b.client(), c.client()
    values = {f"k{i}": np.random.default_rng(i).integers(0, 256, 256 * 1024 + i, dtype=np.uint8) for i in range(8)}
    for key, value in values.items():
        ca.set(key, value)  # non-durable: held only in A's memory
        assert np.array_equal(cb.get(key), value)  # B now holds a full copy
    ca.set("only-on-a", b"nobody read me")
    a.kill9()
    for key, value in values.items():  # wherever the records were (maybe on A), C finds B's copy
        assert np.array_equal(cc.get(key), value)
    with pytest.raises(ObjectLost, match="only-on-a"):
        cc.get("only-on-a")  # no copy anywhere: lost, and said so
    cluster.wait_ring(3, timeout=cluster.lease_ttl + 6)
    assert np.array_equal(cc.get("k3"), values["k3"])


@pytest.mark.timeout(120)
def test_keys_lists_the_whole_mesh_once_each(cluster_of, metastore):
    a, b, c = cluster_of(metastore).start(3)
    ca, cb, cc = a.client(), b.client(), c.client()
    for i in range(30):
        (ca, cb, cc)[i % 3].set(f"roll/{i:02d}", b"x")
    cb.get("roll/00")  # a replica on B must not be listed twice
    ca.set("other", b"y")
    expected = [f"roll/{i:02d}" for i in range(30)]
    for client in (ca, cb, cc):
        assert client.keys("roll/") == expected
    assert cc.keys("roll/", local_only=True) == [f"roll/{i:02d}" for i in range(2, 30, 3)]
    assert "other" in cb.keys() and not any(k.startswith("\x00") for k in cb.keys())
    cc.delete("roll/05")
    assert "roll/05" not in ca.keys("roll/")
