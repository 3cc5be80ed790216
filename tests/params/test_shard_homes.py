"""Parameter shards on their home workers: a version's shards on several workers of one mesh.

Two real workers (``--head`` and ``--join``) stand in for two nodes' workers. The writer
publishes shard ``k`` on its home (the plan's parameter-server node), the commit record on
its own worker last; a reader on the other worker reads the whole version from its own
worker, which pulls the shard it lacks once through the mesh.
"""

from __future__ import annotations

import pytest
import torch

from kilorl.params.store_backed import StoreParameterStore, layout_key, shard_key
from tests.store.store_helpers import WorkerProcess, wait_until


def params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"pi.w": torch.randn(64, 100, generator=g), "pi.b": torch.randn(100, generator=g),
            "v.w": torch.randn(100, 1, generator=g)}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Worker ``a`` (the mesh head, the writer's own) and worker ``b`` (another node's); each
    test publishes its own name."""
    tmp_path = tmp_path_factory.mktemp("homes")
    a = WorkerProcess(tmp_path, "--shm-size", "64MiB", "--head", "--cluster-name", "homes", name="a").start()
    b = None
    try:
        b = WorkerProcess(tmp_path, "--shm-size", "64MiB", "--join", a.address, "--cluster-name", "homes",
                          name="b").start()

        def ring_of_two() -> bool:
            with b.client(zero_copy=False) as c:
                return len(c.stats()["cluster"]["ring"]["members"]) == 2
        wait_until(ring_of_two, 30.0, interval=0.1, what="a ring of 2 members")
        yield a, b
    finally:
        for w in (b, a):
            if w is not None and w.alive():
                w.proc.kill()
                w.proc.wait()


def held(worker: WorkerProcess, name: str) -> dict[str, list[int]]:
    """Versioned names under ``name`` whose bytes ``worker`` itself holds, with their versions."""
    with worker.client(zero_copy=False) as c:
        return {n: [e["version"] for e in entries] for n, entries in c.version_list(name).items()}


def test_each_shard_is_written_to_its_home_worker_and_the_commit_record_to_the_writers_own(two_workers):
    a, b = two_workers
    writer = StoreParameterStore(a.client, num_shards=2, shard_homes=[a.client, b.client])
    try:
        for v in (1, 2):
            writer.publish("homes", v, params(v))
    finally:
        writer.close()
    on_a, on_b = held(a, "homes"), held(b, "homes")
    assert on_a[shard_key("homes", 0)][-1] == 2 and on_a[layout_key("homes")][-1] == 2
    assert shard_key("homes", 1) not in on_a  # nobody read it on a: its bytes never came here
    assert on_b[shard_key("homes", 1)][-1] == 2
    assert shard_key("homes", 0) not in on_b and layout_key("homes") not in on_b


def test_a_reader_on_another_worker_reads_the_whole_version_from_its_own_worker(two_workers):
    a, b = two_workers
    writer = StoreParameterStore(a.client, num_shards=2, shard_homes=[b.client, b.client])
    reader = StoreParameterStore(b.client, num_shards=2)
    try:
        writer.publish("remote", 1, params(1))
        assert shard_key("remote", 0) not in held(a, "remote")  # both shards live on b
        assert reader.wait("remote", 1, timeout=60) == 1
        version, got = reader.fetch("remote")
        assert version == 1 and all(torch.equal(got[k], t) for k, t in params(1).items())
        writer.publish("remote", 2, params(2))
        out = {k: torch.zeros_like(t) for k, t in params(0).items()}
        assert reader.fetch_into("remote", out, version=2) == 2
        assert all(torch.equal(out[k], t) for k, t in params(2).items())
    finally:
        writer.close()
        reader.close()


def pulls(worker: WorkerProcess) -> int:
    """Reads ``worker`` made from other workers (whole objects and byte ranges)."""
    with worker.client(zero_copy=False) as c:
        counters = c.stats()["cluster"]["counters"]
    return counters["remote_gets"] + counters["remote_ranges"]


def test_a_second_reader_on_the_same_worker_reads_the_shards_its_worker_pulled_once(two_workers):
    a, b = two_workers
    writer = StoreParameterStore(a.client, num_shards=2, shard_homes=[a.client, b.client])
    readers = [StoreParameterStore(b.client, num_shards=2, shard_homes=[a.client, b.client]) for _ in range(2)]
    try:
        writer.publish("once", 1, params(1))
        before = pulls(b)
        _, got = readers[0].fetch("once")
        after_first = pulls(b)
        _, again = readers[1].fetch("once")
        assert after_first > before  # shard 0 and the record came from a
        assert pulls(b) == after_first  # the second reader's read came from b's own copy
        assert shard_key("once", 0) in held(b, "once")  # which b pulled whole, once
        assert all(torch.equal(got[k], t) and torch.equal(again[k], t) for k, t in params(1).items())
    finally:
        writer.close()
        for r in readers:
            r.close()


def test_publish_stats_give_each_shards_bytes_and_its_workers_seconds(two_workers):
    a, b = two_workers
    writer = StoreParameterStore(a.client, num_shards=2, shard_homes=[a.client, b.client])
    try:
        assert writer.publish_stats() == {}
        writer.publish("stats", 1, params(1))
        stats = writer.publish_stats()
    finally:
        writer.close()
    total = sum(t.numel() * t.element_size() for t in params(1).values())
    assert stats["ps_shard0_bytes"] + stats["ps_shard1_bytes"] == total
    assert stats["ps_shard0_bytes"] > 0 and stats["ps_shard1_bytes"] > 0
    assert stats["ps_shard0_publish_s"] > 0 and stats["ps_shard1_publish_s"] > 0


def test_shard_homes_must_name_one_worker_per_shard(store_worker):
    with pytest.raises(ValueError, match="shard_homes names 1 workers for 2 shards"):
        StoreParameterStore(store_worker.client, num_shards=2, shard_homes=[store_worker.client])
