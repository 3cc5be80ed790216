"""Several client processes hammering one small worker: no deadlock, no corruption."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLIENT = """
import hashlib, random, sys, time
import numpy as np
from kilorl.store import StoreClient, KeyNotFound, StoreFullError
c = StoreClient(sys.argv[1], token=sys.argv[2])
rng = random.Random(int(sys.argv[3]))
deadline = time.monotonic() + 4.0
ops = 0
while time.monotonic() < deadline:
    key = f"k{rng.randrange(12)}"
    op = rng.random()
    if op < 0.45:
        n = rng.choice([100, 70_000, 600_000])
        fill = rng.randrange(256)
        try:
            c.set(key, np.full(n, fill, dtype=np.uint8), ttl=rng.choice([None, None, 0.5]))
        except StoreFullError:
            pass
    elif op < 0.9:
        try:
            v = c.get(key)
        except KeyNotFound:
            continue
        assert (v == v[0]).all(), "torn or corrupted object"
    elif op < 0.95:
        c.delete(key)
    else:
        c.keys()
    ops += 1
print(ops)
"""


@pytest.mark.slow
def test_concurrent_clients_on_a_small_worker(workers, tmp_path):
    w = workers("--shm-size", "4MiB", "--disk-dir", str(tmp_path / "spill"), "--disk-size", "64MiB")
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT, w.address, w.token, str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert int(out) > 50
    c = w.client()
    stats = c.stats()
    assert w.alive() and stats["leases"] == 0
    assert stats["tiers"]["dram"]["used"] <= 4 << 20
    for key in c.keys():
        v = c.get(key)
        assert (v == v[0]).all()
        del v  # drop the view: its lease goes back with the next request
    c.delete(*c.keys())
    c.flush_releases()
    assert c.stats()["tiers"]["dram"]["used"] == 0 and c.stats()["tiers"]["disk"]["used"] == 0
