"""Readers move only the bytes their layout needs, counted by the worker that serves them.

The worker counts, per connection, the object bytes it hands out (``stats()["connection"]``):
a reader of shard ``i`` of ``N`` reads about ``1/N`` of the version (plus the commit record),
the ``N`` readers together read every byte exactly once, and each read equals the slice of
the original, whatever number of shards the writer cut the vector into.
"""

from __future__ import annotations

import pytest
import torch

from kilorl.params import Full, Shard
from kilorl.params.store_backed import StoreParameterStore, layout_key


def policy(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"emb": torch.randn(512, 64, generator=g), "w1": torch.randn(256, 384, generator=g),
            "b1": torch.randn(384, generator=g), "w2": torch.randn(384, 96, generator=g).to(torch.bfloat16)}


def slice_of(t: torch.Tensor, part) -> torch.Tensor:
    return t if isinstance(part, Full) else torch.tensor_split(t, part.count, dim=part.dim)[part.index]


def bytes_read(store: StoreParameterStore) -> int:
    return store.client.stats()["connection"]["bytes_read"]


def record_size(store_worker) -> int:
    with store_worker.client() as c:
        return len(bytes(c.get_version(layout_key("policy")).value))


@pytest.mark.parametrize("writer_shards", [1, 3, 7])
@pytest.mark.parametrize("dim", [0, 1])
def test_n_readers_of_a_sharded_layout_each_read_one_nth_and_all_bytes_once(store_worker, writer_shards, dim):
    original = policy(writer_shards)
    total = sum(t.numel() * t.element_size() for t in original.values())
    writer = StoreParameterStore(store_worker.client, num_shards=writer_shards)
    writer.publish("policy", 1, original)
    record = record_size(store_worker)
    n, moved = 4, []
    for i in range(n):
        reader = StoreParameterStore(store_worker.client, num_shards=writer_shards)
        layout = {k: Shard(i, n, dim=min(dim, t.dim() - 1)) for k, t in original.items()}
        before = bytes_read(reader)
        version, got = reader.fetch("policy", layout=layout)
        moved.append(bytes_read(reader) - before - record)
        assert version == 1
        for k, part in layout.items():
            assert torch.equal(got[k], slice_of(original[k], part)), k
        reader.close()
    assert sum(moved) == total  # every byte read once, by exactly one reader
    assert all(abs(m - total / n) <= 0.02 * total for m in moved), (moved, total)
    writer.close()


def test_a_full_replica_reads_the_whole_version_and_a_subset_only_its_tensors(store_worker):
    original = policy(1)
    total = sum(t.numel() * t.element_size() for t in original.values())
    store = StoreParameterStore(store_worker.client, num_shards=2)
    store.publish("policy", 1, original)
    record = record_size(store_worker)
    before = bytes_read(store)
    _, got = store.fetch("policy")
    assert bytes_read(store) - before == total + record
    assert all(torch.equal(got[k], t) for k, t in original.items())
    before = bytes_read(store)
    _, got = store.fetch("policy", layout=["b1"])
    assert bytes_read(store) - before == original["b1"].numel() * 4 + record and set(got) == {"b1"}
    store.close()


def test_a_reader_follows_a_writer_whose_layout_changes_between_versions(store_worker):
    writer = StoreParameterStore(store_worker.client, num_shards=3)
    reader = StoreParameterStore(store_worker.client, num_shards=3)
    big, small = policy(1), {"b1": torch.arange(384.0), "w1": torch.ones(8, 2)}
    writer.publish("policy", 1, big)
    assert torch.equal(reader.fetch("policy", layout={"b1": Full()})[1]["b1"], big["b1"])
    writer.publish("policy", 2, small)  # b1 now lies elsewhere, and the shards shrank past the old ranges
    version, got = reader.fetch("policy", layout={"b1": Full()})
    assert version == 2 and torch.equal(got["b1"], small["b1"])
    writer.publish("policy", 3, big)
    assert torch.equal(reader.fetch("policy", layout={"b1": Shard(1, 2)})[1]["b1"], big["b1"][192:])
    writer.close()
    reader.close()


def test_a_wait_brings_the_version_so_the_fetch_after_it_needs_no_request(tmp_path):
    """After the wait the worker is killed: the fetch still returns the version it waited for."""
    from tests.store.store_helpers import WorkerProcess

    w = WorkerProcess(tmp_path, "--shm-size", "64MiB", name="w").start()
    try:
        writer, reader = StoreParameterStore(w.client, 2), StoreParameterStore(w.client, 2)
        layout = {"w1": Shard(0, 2, dim=1), "b1": Full()}
        writer.publish("policy", 1, policy(1))
        reader.fetch("policy", layout=layout)  # the layout this reader reads with
        writer.publish("policy", 2, policy(2))
        assert reader.wait("policy", 2, timeout=10) == 2
        w.kill9()
        version, got = reader.fetch("policy", layout=layout)
        assert version == 2 and torch.equal(got["w1"], policy(2)["w1"][:, :192])
        assert torch.equal(got["b1"], policy(2)["b1"])
    finally:
        if w.alive():
            w.proc.kill()
            w.proc.wait(10)
        w.remove_arena()


def test_a_layout_of_more_ranges_than_one_request_carries_is_read_exactly_in_several(store_worker):
    from kilorl.params.store_reads import MAX_RANGES

    rows = 3 * MAX_RANGES + 5  # a column slice: one byte range per row
    original = {"tall": torch.randn(rows, 8), "b": torch.randn(10)}
    store = StoreParameterStore(store_worker.client, num_shards=2)
    store.publish("policy", 1, original)
    record = record_size(store_worker)
    for _ in range(2):  # planned, then from the cached plan
        before = bytes_read(store)
        _, got = store.fetch("policy", layout={"tall": Shard(1, 4, dim=1)})
        assert torch.equal(got["tall"], original["tall"][:, 2:4])
        assert bytes_read(store) - before - record == rows * 2 * 4
    store.close()


def test_the_writers_layout_of_a_version_is_its_commit_record(store_worker):
    store = StoreParameterStore(store_worker.client, num_shards=3)
    store.publish("policy", 4, policy(4))
    version, layout = store.layout("policy")
    assert version == 4 and layout.num_shards == 3 and [t.name for t in layout.tensors] == list(policy(4))
    assert layout.total_bytes == sum(t.numel() * t.element_size() for t in policy(4).values())
    store.close()
