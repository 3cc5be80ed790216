"""Durable replay tables (``durable: true``): chunks written back to the worker's L2, served
again by a worker restarted on the same directory after a kill -9."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kilorl.store import InvalidRequest
from kilorl.store.replay.spec import make_spec

FRAMES = {"frame": ((84, 84), np.uint8), "action": ((), np.int64), "reward": ((), np.float32)}
FLUSH_DEADLINE_S = 60.0
"""How long the write-back of a few hundred KiB may take on a loaded machine (far above need)."""


def chunk(i: int, rows: int = 8) -> dict[str, np.ndarray]:
    """Rows whose every column encodes its insert position ``8 i + r``."""
    ids = np.arange(i * rows, (i + 1) * rows)
    frame = np.zeros((rows, 84, 84), np.uint8)
    frame[:, 0, :8] = ids.astype("<u8").view(np.uint8).reshape(rows, 8)
    frame[:, 1 + ids % 80, :] = 255
    return {"frame": frame, "action": ids.astype(np.int64), "reward": ids.astype(np.float32) / 7}


def test_a_worker_killed_and_restarted_serves_every_flushed_chunk_again(workers, tmp_path):
    l2 = str(tmp_path / "l2")
    w = workers("--shm-size", "16MiB", "--l2-dir", l2, name="a")
    c = w.client()
    t = c.replay_tables
    t.create(make_spec("d", FRAMES, 200, compression="zstd", chunk_length=8, durable=True))
    for i in range(40):  # 320 rows into 200: the first 15 chunks' rows are evicted
        t.insert("d", chunk(i))
    deadline = time.monotonic() + FLUSH_DEADLINE_S
    while (info := t.info("d"))["durable_pending_chunks"]:
        assert time.monotonic() < deadline, info
        time.sleep(0.02)
    assert info["durable_flushed_chunks"] == 40
    want = {r: chunk(r // 8)["frame"][r % 8].tobytes() for r in range(120, 320)}
    w.kill9()
    w2 = workers("--shm-size", "16MiB", "--l2-dir", l2, name="b")
    c2 = w2.client()
    t2 = c2.replay_tables
    info = t2.info("d")
    assert (info["rows"], info["inserted_rows"]) == (200, 320), info
    s = t2.sample("d", 4000)
    assert set(s.ids.tolist()) == set(want)  # every live row back, under its old id
    for i, rid in enumerate(s.ids.tolist()):
        assert s.columns["frame"][i].tobytes() == want[rid]
        assert s.columns["action"][i] == rid and s.columns["reward"][i] == np.float32(rid) / 7
    files = list((tmp_path / "l2" / "replay" / "objects").glob("*.obj"))
    assert len(files) == 1 + 25  # the definition and the chunks with a live row; evicted ones deleted
    t2.insert("d", chunk(40))  # the restarted table goes on: ids continue
    assert t2.info("d")["inserted_rows"] == 328
    c2.close()


def test_a_durable_table_on_a_worker_without_l2_is_refused_naming_the_field(client):
    with pytest.raises(InvalidRequest, match=r"table\.durable: replay table 'd' is durable but this worker has no L2"):
        client.replay_tables.create(make_spec("d", FRAMES, 10, durable=True))
