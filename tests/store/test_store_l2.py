"""Durability: write-through survives kill -9, write-back survives a clean stop."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kilorl.store import InvalidRequest, KeyNotFound, WriteMode


def payload(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 255, 512 + (i * 37) % 4096, dtype=np.uint8).tobytes()


def sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def test_write_through_survives_kill9(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "32MiB", "--l2-dir", l2, name="a")
    c = w.client()
    sums = {}
    for i in range(1000):
        c.set(f"k{i}", payload(i), write_mode=WriteMode.WRITE_THROUGH_L2)
        sums[f"k{i}"] = sha(payload(i))
    big = np.random.default_rng(7).standard_normal(1 << 20).astype(np.float32)  # zero-copy write path
    c.set("big", big, write_mode=WriteMode.WRITE_THROUGH_L2)
    c.set("volatile", b"gone after restart")
    c.close()
    w.kill9()
    w2 = workers("--shm-size", "32MiB", "--l2-dir", l2, name="b")
    c2 = w2.client()
    assert len(c2.keys("k")) == 1000
    for key, s in sums.items():
        assert sha(c2.get(key)) == s
    assert np.array_equal(c2.get("big"), big)
    assert not c2.exists("volatile")


def test_write_back_flushed_on_clean_stop(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "32MiB", "--l2-dir", l2, name="a")
    c = w.client()
    for i in range(1000):
        c.set(f"k{i}", payload(i), write_mode=WriteMode.WRITE_BACK_L2)
    c.close()
    assert w.stop() == 0
    assert "L2 flushed" in w.read_log()
    w2 = workers("--shm-size", "32MiB", "--l2-dir", l2, name="b")
    c2 = w2.client()
    assert len(c2.keys("k")) == 1000
    for i in range(1000):
        assert sha(c2.get(f"k{i}")) == sha(payload(i))


def test_overwrite_delete_and_ttl_are_durable_too(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "16MiB", "--l2-dir", l2, name="a")
    c = w.client()
    for key in ("keep", "overwrite", "delete", "ttl"):
        c.set(key, key.encode(), write_mode=WriteMode.WRITE_THROUGH_L2)
    c.set("overwrite", b"memory only now")  # NONE_L2 replaces the durable copy
    c.delete("delete")
    c.set("ttl", b"short", write_mode=WriteMode.WRITE_THROUGH_L2, ttl=0.5)
    c.set("keep", b"v2", write_mode=WriteMode.WRITE_THROUGH_L2)
    w.kill9()
    import time

    time.sleep(0.6)  # let the 0.5 s TTL pass while the worker is down
    c2 = workers("--shm-size", "16MiB", "--l2-dir", l2, name="b").client()
    assert bytes(c2.get("keep")) == b"v2"
    for key in ("overwrite", "delete", "ttl"):
        with pytest.raises(KeyNotFound):
            c2.get(key)


def test_l2_mode_without_l2_is_an_error(client):
    for mode in (WriteMode.WRITE_THROUGH_L2, WriteMode.WRITE_BACK_L2):
        with pytest.raises(InvalidRequest, match="L2"):
            client.set("k", b"x", write_mode=mode)
        with pytest.raises(InvalidRequest, match="L2"):
            client.set("k", np.zeros(1 << 20, dtype=np.uint8), write_mode=mode)  # zero-copy path
    assert not client.exists("k")
    assert client.stats()["tiers"]["dram"]["used"] == 0  # the staged region was returned


def test_l2_objects_evicted_from_memory_are_served_from_l2(workers, tmp_path):
    w = workers("--shm-size", "8MiB", "--l2-dir", str(tmp_path / "l2"))
    c = w.client()
    blobs = {f"b{i}": np.full(1 << 20, i, dtype=np.uint8) for i in range(20)}  # 20 MiB > 8 MiB, no disk tier
    for k, v in blobs.items():
        c.set(k, v, write_mode=WriteMode.WRITE_THROUGH_L2)
    assert c.stats()["counters"]["evictions_to_l2"] > 0
    for k, v in blobs.items():
        assert np.array_equal(c.get(k), v)


def test_write_back_queue_is_bounded(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "32MiB", "--l2-dir", l2, "--write-back-queue", "4", name="a")
    c = w.client()
    probe = w.client()
    depths = []
    for i in range(300):
        c.set(f"k{i}", payload(i), write_mode=WriteMode.WRITE_BACK_L2)
        if i % 10 == 0:
            depths.append(probe.stats()["l2"]["queue"])
    assert max(depths) <= 4  # writers waited for the flusher instead of growing the queue
    assert w.stop() == 0
    c2 = workers("--shm-size", "32MiB", "--l2-dir", l2, name="b").client()
    assert len(c2.keys("k")) == 300


def test_corrupt_l2_files_are_skipped_not_fatal(workers, tmp_path):
    l2 = tmp_path / "l2"
    w = workers("--shm-size", "16MiB", "--l2-dir", str(l2), name="a")
    c = w.client()
    c.set("good", b"fine", write_mode=WriteMode.WRITE_THROUGH_L2)
    c.set("cut", b"x" * 10_000, write_mode=WriteMode.WRITE_THROUGH_L2)
    w.kill9()
    files = sorted((l2 / "objects").glob("*.obj"), key=lambda p: p.stat().st_size)
    big = files[-1]
    big.write_bytes(big.read_bytes()[:5000])  # a torn file (e.g. disk trouble)
    (l2 / "objects" / "junk.obj").write_bytes(b"not an object")
    w2 = workers("--shm-size", "16MiB", "--l2-dir", str(l2), name="b")
    c2 = w2.client()
    assert bytes(c2.get("good")) == b"fine"
    assert not c2.exists("cut")
    assert "skipping unreadable L2 file" in w2.read_log()
