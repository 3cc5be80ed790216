"""Zero-copy reads on one node: views into the shared arena, protected by leases."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import torch
from store_helpers import run_python, wait_until

from kilorl.store.wire.shm import Arena


def arena_base(client) -> int:
    return np.frombuffer(client.arena.view, dtype=np.uint8).ctypes.data


def test_get_is_a_view_of_the_arena(client):
    data = np.arange(1 << 20, dtype=np.uint8)
    client.set("zc", data)
    v1, v2 = client.get("zc"), client.get("zc")
    loc = client.locate("zc")
    assert loc["tier"] == "dram"
    # The returned array's memory is the arena at the object's offset: no copy was made.
    assert v1.ctypes.data == arena_base(client) + loc["offset"]
    assert np.shares_memory(v1, v2)
    assert not v1.flags.writeable
    # Changing the arena through an independent mapping is visible through the view.
    other = Arena.attach(client.info["arena"], client.info["arena_size"])
    raw = np.frombuffer(other.view, dtype=np.uint8)
    raw[loc["offset"]] = 201
    assert v1[0] == 201 and v2[0] == 201
    raw[loc["offset"]] = 0
    del raw
    other.close()


def test_tensors_and_dicts_are_views_too(client):
    state = {"w": torch.randn(512, 256), "b": torch.randn(256)}
    client.set("state", state)
    got = client.get("state")
    loc = client.locate("state")
    base = arena_base(client) + loc["offset"]
    assert base <= got["w"].data_ptr() < base + loc["size"]
    assert base <= got["b"].data_ptr() < base + loc["size"]
    assert torch.equal(got["w"], state["w"]) and torch.equal(got["b"], state["b"])


def test_leases_are_released_when_views_are_dropped(client):
    client.set("big", np.ones(4 << 20, dtype=np.uint8))
    views = [client.get("big") for _ in range(3)]
    assert client.stats()["leases"] == 3
    client.delete("big")
    # Deleted, but readers hold it: the bytes stay valid and allocated.
    assert all(v.sum() == 4 << 20 for v in views)
    assert client.stats()["tiers"]["dram"]["used"] >= 4 << 20
    del views
    gc.collect()
    client.flush_releases()
    stats = client.stats()
    assert stats["leases"] == 0 and stats["tiers"]["dram"]["used"] == 0


def test_dead_reader_releases_its_leases(worker, client):
    client.set("held", np.ones(2 << 20, dtype=np.uint8))
    code = f"""
import os, signal
from kilorl.store import StoreClient
c = StoreClient({worker.address!r}, token={worker.token!r})
v = c.get("held")
assert v.sum() == 2 << 20
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    r = run_python(code)
    assert "holding" in r.stdout
    client.delete("held")
    wait_until(lambda: client.stats()["tiers"]["dram"]["used"] == 0, what="dead reader's lease released")


def test_readers_keep_valid_data_while_writers_update_the_key(worker, client):
    n = 1 << 18  # 1 MiB of float32 per version; 64 MiB arena: regions get reused quickly
    client.set("hot", np.zeros(n, dtype=np.float32))
    held = client.get("hot")
    writer = subprocess.Popen([sys.executable, "-c", f"""
import numpy as np
from kilorl.store import StoreClient
c = StoreClient({worker.address!r}, token={worker.token!r})
for i in range(1, 301):
    c.set("hot", np.full({n}, i, dtype=np.float32))
"""])
    try:
        seen = set()
        while writer.poll() is None or len(seen) < 2:
            v = client.get("hot")
            first = v[0]
            assert (v == first).all(), "torn read: a view mixed two versions"
            seen.add(float(first))
            del v
            if writer.poll() is not None and len(seen) < 2:
                seen.add(float(client.get("hot")[0]))
        assert writer.returncode == 0
        assert float(client.get("hot")[0]) == 300.0
        # The view taken before any update still holds the original bytes.
        assert (held == 0).all()
        assert len(seen) >= 2
    finally:
        writer.kill()
        writer.wait()


def test_the_background_prefault_touches_every_page_and_changes_no_byte_written_meanwhile():
    arena = Arena.create(64 << 20, prefault=False)
    try:
        data = np.frombuffer(arena.mm, dtype=np.uint8)
        data[:4096 * 3] = 7  # a value stored before (and while) the pages are populated
        thread = arena.populate_in_background(chunk=8 << 20)
        data[(32 << 20):(32 << 20) + 4096] = 9
        assert thread is not None
        thread.join(60)
        assert not thread.is_alive() and arena.populated.is_set()
        with open(f"/proc/{os.getpid()}/smaps") as f:  # resident before any read below touches a page
            block = f.read().split(str(arena.path))[1].split("VmFlags")[0]
        assert int(block.split("Rss:")[1].split()[0]) >= (64 << 10) - 4  # KiB: every page of 64 MiB
        assert int(data[:4096 * 3].min()) == 7 and int(data[(32 << 20):(32 << 20) + 4096].min()) == 9
        assert int(data[4096 * 3:(32 << 20)].max()) == 0
    finally:
        arena.close()


def test_a_worker_says_when_its_arena_is_pre_faulted(client):
    wait_until(lambda: client.stats()["arena_populated"], timeout=30, what="the arena pre-faulted")
