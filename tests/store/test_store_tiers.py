"""Tiers and placement: spill to disk, promotion, exhaustion, pin, watermarks, device."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from kilorl.store import StoreFullError

MiB = 1 << 20


def blob(i: int, size: int = MiB) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 255, size, dtype=np.uint8)


def digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.mark.parametrize("zero_copy", [True, False])
def test_spill_to_disk_and_promotion_back_with_same_bytes(workers, tmp_path, zero_copy):
    w = workers("--shm-size", "16MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "256MiB")
    c = w.client(zero_copy=zero_copy)
    sums = {}
    for i in range(40):  # 40 MiB into a 16 MiB arena
        c.set(f"obj{i}", blob(i))
        sums[f"obj{i}"] = digest(blob(i))
    stats = c.stats()
    assert stats["tiers"]["disk"]["objects"] > 0 and stats["counters"]["demotions"] > 0
    assert stats["tiers"]["dram"]["used"] <= 16 * MiB
    spilled = [k for k in sums if c.locate(k)["tier"] == "disk"]
    assert spilled
    for key in spilled[:10]:
        assert digest(c.get(key)) == sums[key]
        assert c.locate(key)["tier"] == "dram"  # promoted back on access
    for key, s in sums.items():
        assert digest(c.get(key)) == s
    assert c.stats()["counters"]["promotions"] >= 10


@pytest.mark.parametrize("zero_copy", [True, False])
def test_arena_exhaustion_is_a_clear_error(workers, zero_copy):
    w = workers("--shm-size", "8MiB")
    c = w.client(zero_copy=zero_copy)
    c.set("a", blob(1, 6 * MiB))
    with pytest.raises(StoreFullError, match="dram tier full"):
        c.set("b", blob(2, 6 * MiB))
    with pytest.raises(StoreFullError, match="need 20971520 bytes"):
        c.set("c", blob(3, 20 * MiB))
    assert w.alive()
    assert digest(c.get("a")) == digest(blob(1, 6 * MiB))
    assert not c.exists("b")
    c.delete("a")
    c.set("b", blob(2, 6 * MiB))  # the memory is usable again
    assert digest(c.get("b")) == digest(blob(2, 6 * MiB))


def test_pin_keeps_an_object_in_its_tier(workers, tmp_path):
    w = workers("--shm-size", "16MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "128MiB")
    c = w.client()
    c.set("pinned", blob(0), pin=True)
    c.set("other", blob(1))
    c.pin("other")
    c.unpin("other")
    for i in range(2, 40):
        c.set(f"o{i}", blob(i))
    assert c.locate("pinned")["tier"] == "dram" and c.locate("pinned")["pinned"]
    assert c.locate("other")["tier"] == "disk"


def test_watermarks_bound_dram_usage(workers, tmp_path):
    w = workers("--shm-size", "20MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "128MiB")
    c = w.client()
    for i in range(19):
        c.set(f"o{i}", blob(i))
        assert c.stats()["tiers"]["dram"]["used"] <= 0.9 * 20 * MiB + MiB
    # Crossing the high watermark (90%) demoted the coldest objects down to the low one (75%).
    assert c.stats()["tiers"]["dram"]["used"] <= 0.75 * 20 * MiB + MiB
    assert c.locate("o0")["tier"] == "disk"  # oldest = coldest
    assert c.locate("o18")["tier"] == "dram"


def test_hot_disk_object_is_promoted_and_cold_one_stays(workers, tmp_path):
    w = workers("--shm-size", "16MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "64MiB")
    c = w.client()
    c.set("archive/cold", blob(1), tier="disk")
    c.set("archive/hot", blob(2), tier="disk")
    assert c.locate("archive/hot")["tier"] == "disk"
    c.get("archive/cold")
    assert c.locate("archive/cold")["tier"] == "disk"  # one read: stays in its preferred tier
    for _ in range(4):
        got = c.get("archive/hot")
    assert digest(got) == digest(blob(2))
    assert c.locate("archive/hot")["tier"] == "dram"  # accessed often: lifted into DRAM


def test_device_tier_on_cpu(workers, tmp_path):
    w = workers("--shm-size", "16MiB", "--device", "cpu", "--device-size", "8MiB", "--tier-rule", "policy/=device")
    c = w.client()
    weights = {"w": torch.randn(256, 1024), "b": torch.randn(1024)}  # ~1 MiB
    c.set("policy/w", weights)
    assert c.locate("policy/w")["tier"] == "device"  # by prefix rule
    c.set("value/w", weights)
    assert c.locate("value/w")["tier"] == "dram"
    got = c.get("policy/w")
    assert torch.equal(got["w"], weights["w"]) and torch.equal(got["b"], weights["b"])
    # Filling the device tier demotes the coldest device objects to DRAM ...
    for i in range(10):
        c.set(f"dev{i}", torch.full((MiB // 4,), float(i)), tier="device")
    assert c.stats()["tiers"]["device"]["used"] <= 8 * MiB
    demoted = [f"dev{i}" for i in range(10) if c.locate(f"dev{i}")["tier"] == "dram"]
    assert demoted and c.locate("policy/w")["tier"] == "device"  # read once more: warmer, kept
    # ... and reading one brings it back to its preferred tier, bytes intact.
    key = demoted[0]
    assert torch.equal(c.get(key), torch.full((MiB // 4,), float(key[3:])))
    assert c.locate(key)["tier"] == "device"
    for i in range(10):
        assert torch.equal(c.get(f"dev{i}"), torch.full((MiB // 4,), float(i)))
    assert torch.equal(c.get("policy/w")["w"], weights["w"])


def test_reads_are_counted_by_the_tier_that_served_them(workers, tmp_path):
    """The hit rates: a read of a spilled object counts for disk, even though it is promoted on the way."""
    w = workers("--shm-size", "16MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "256MiB")
    c = w.client()
    for i in range(40):  # 40 MiB into a 16 MiB arena
        c.set(f"obj{i}", blob(i))
    where = {f"obj{i}": c.locate(f"obj{i}")["tier"] for i in range(40)}
    in_memory = [k for k, t in where.items() if t == "dram"][:3]
    on_disk = [k for k, t in where.items() if t == "disk"][:2]
    assert in_memory and on_disk
    before = c.stats()["counters"]
    for key in in_memory + on_disk:
        c.get(key)
    with pytest.raises(KeyError):
        c.get("never-written")  # a missing key is no read of any tier
    after = c.stats()["counters"]
    assert after["reads_dram"] - before["reads_dram"] == len(in_memory)
    assert after["reads_disk"] - before["reads_disk"] == len(on_disk)
    assert after["reads_l2"] == before["reads_l2"] and after["reads_device"] == before["reads_device"]
