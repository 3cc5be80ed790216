"""Versioned objects: monotonic versions, whole-version reads, reclamation of old ones."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import torch
from store_helpers import wait_until

from kilorl.store import InvalidRequest, StoreTimeout, VersionGone, WriteMode


def params(v: int) -> dict:
    return {f"layer{i}": torch.full((64, 1024), float(v)) for i in range(4)}  # 1 MiB per version


def test_publish_latest_get_and_monotonic(client):
    assert client.latest_version("policy") is None
    with pytest.raises(VersionGone):
        client.get_version("policy")
    client.publish("policy", version=1, value=params(1))
    client.publish("policy", version=2, value=params(2))
    assert client.latest_version("policy") == 2
    v, value = client.get_version("policy")
    assert v == 2 and all(torch.equal(t, torch.full((64, 1024), 2.0)) for t in value.values())
    assert client.get_version("policy", 1).version == 1
    with pytest.raises(InvalidRequest, match="version"):
        client.publish("policy", version=2, value=params(9))
    assert client.keys() == []  # versions are not in the KV key space


def test_old_versions_reclaimed_when_no_reader_holds_them(client):
    client.publish("p", version=1, value=params(1))
    held = client.get_version("p", 1).value
    for v in range(2, 6):
        client.publish("p", version=v, value=params(v))
    with pytest.raises(VersionGone):
        client.get_version("p", 1)
    # keep_versions=2: versions 4 and 5 are held by the worker, version 1 by our reader.
    assert torch.equal(held["layer0"], torch.full((64, 1024), 1.0))
    used_with_reader = client.stats()["tiers"]["dram"]["used"]
    assert used_with_reader >= 3 * (1 << 20)
    del held
    gc.collect()
    client.flush_releases()
    assert client.stats()["tiers"]["dram"]["used"] <= used_with_reader - (1 << 20)


def test_wait_version_across_processes_and_no_torn_reads(worker, client):
    with pytest.raises(StoreTimeout):
        client.wait_version("w", 1, timeout=0.2)
    publisher = subprocess.Popen([sys.executable, "-c", f"""
import torch
from kilorl.store import StoreClient
c = StoreClient({worker.address!r}, token={worker.token!r})
for v in range(1, 61):
    c.publish("w", version=v, value={{f"layer{{i}}": torch.full((64, 1024), float(v)) for i in range(4)}})
"""])
    try:
        assert client.wait_version("w", 1, timeout=30) >= 1
        seen = []
        while True:
            v, value = client.get_version("w")
            for t in value.values():  # every tensor of one read belongs to the same version
                assert bool((t == float(v)).all()), f"torn read at version {v}"
            seen.append(v)
            del value
            if v == 60:
                break
        assert seen == sorted(seen)
        assert client.wait_version("w", 60, timeout=5) == 60
    finally:
        publisher.wait(60)
    assert publisher.returncode == 0


def test_versions_survive_restart_with_write_through(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "32MiB", "--l2-dir", l2, name="a")
    c = w.client()
    for v in (3, 4, 5):
        c.publish("policy", version=v, value=params(v), write_mode=WriteMode.WRITE_THROUGH_L2)
    w.kill9()
    c2 = workers("--shm-size", "32MiB", "--l2-dir", l2, name="b").client()
    assert c2.latest_version("policy") == 5
    assert torch.equal(c2.get_version("policy").value["layer3"], torch.full((64, 1024), 5.0))
    wait_until(lambda: c2.get_version("policy", 4).version == 4, what="version 4 kept")


def test_publish_numbers_versions_when_none_is_given(client):
    assert client.publish("auto", b"a") == 1
    assert client.publish("auto", b"b") == 2
    assert client.publish("auto", b"c", version=10) == 10
    assert client.publish("auto", b"d") == 11
    assert bytes(client.get_version("auto").value) == b"d"


def test_get_version_ranges_read_parts_of_one_version(client):
    value = params(3)
    client.publish("r", value)
    client.set("layout-probe", value)  # same encoding: describe gives the offsets
    layout = client.describe("layout-probe")["entries"]
    off = layout["layer2"]["offset"]
    got = client.get_version("r", ranges=[(off, 4 * 1024), (layout["layer0"]["offset"], 8)])
    assert got.version == 1
    first = torch.frombuffer(bytearray(got.value[0]), dtype=torch.float32)
    assert torch.equal(first, value["layer2"].reshape(-1)[:1024])
    assert len(got.value[1]) == 8


def test_bad_version_requests_name_the_field(client):
    client.publish("bad", b"x")
    with pytest.raises(InvalidRequest, match=r"ranges\[0\]"):
        client.get_version("bad", ranges=[(0,)])
    with pytest.raises(InvalidRequest, match="offset/length"):
        client.get_version("bad", ranges=[(0, 2)])
    with pytest.raises(InvalidRequest, match="version"):
        client.publish("bad", b"y", version=-1)
    assert client.ping()  # the connection is still usable after each error
