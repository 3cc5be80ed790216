"""The replay table's parts alone: sum tree, rate limiter admission, codecs, specs."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.store.errors import InvalidRequest
from kilorl.store.replay import codec
from kilorl.store.replay.limiter import RateLimiter
from kilorl.store.replay.spec import LimiterSpec, TableSpec, make_spec
from kilorl.store.replay.sumtree import SumTree


def test_sum_tree_finds_the_slot_whose_interval_holds_each_point():
    rng = np.random.default_rng(0)
    tree = SumTree(1000)
    w = rng.random(1000) * (rng.random(1000) > 0.3)  # a third of the slots weigh nothing
    tree.set(np.arange(1000), w)
    assert tree.total == pytest.approx(w.sum())
    points = rng.random(5000) * w.sum()
    expected = np.searchsorted(np.cumsum(w), points, side="right")
    assert np.array_equal(tree.find(points), expected)
    assert np.all(w[tree.sample(rng, 5000)] > 0)


def test_sum_tree_batch_update_with_repeated_slots_keeps_sums():
    tree = SumTree(7)
    tree.set(np.array([1, 1, 6]), np.array([5.0, 2.0, 3.0]))  # the last weight of a slot wins
    assert tree.total == pytest.approx(5.0)
    assert tree.get(np.array([1, 6])).tolist() == [2.0, 3.0]
    with pytest.raises(ValueError):
        tree.set(np.array([0]), np.array([-1.0]))


def test_limiter_always_admits_one_side():
    """Whatever the calls' sizes, when one side is refused the other is admitted: two sides
    that keep calling never deadlock."""
    rng = np.random.default_rng(1)
    for spi in (0.25, 1.0, 4.0, 32.0):
        lim = RateLimiter(LimiterSpec(samples_per_insert=spi, min_size_to_sample=10))
        size = 0
        for _ in range(2000):
            ins, smp = lim.can_insert(size), lim.can_sample(size)
            assert ins or smp, (spi, lim.diff, size)
            if smp and (not ins or rng.random() < 0.5):
                lim.sampled_rows(int(rng.integers(1, 300)))
            else:
                k = int(rng.integers(1, 50))
                lim.inserted_rows(k)
                size += k


def test_codecs_round_trip_and_refuse_wrong_sizes():
    data = np.arange(4096, dtype=np.uint8).tobytes()
    for name in ("none", "zstd"):
        assert bytes(codec.decompress(codec.compress(data, name), name, len(data))) == data
    with pytest.raises(ValueError, match="expected 10"):
        codec.decompress(codec.compress(data, "zstd"), "zstd", 10)
    with pytest.raises(ValueError, match="zstd"):
        codec.decompress(b"\x28\xb5\x2f\xfd garbage", "zstd", 100)


def test_spec_errors_name_the_field():
    with pytest.raises(InvalidRequest, match="table.compression"):
        make_spec("t", {"x": ((), np.float32)}, 10, compression="gzip")
    with pytest.raises(InvalidRequest, match="min_size_to_sample"):
        make_spec("t", {"x": ((), np.float32)}, 10, limiter={"min_size_to_sample": 11})
    with pytest.raises(InvalidRequest, match="tolerance"):
        make_spec("t", {"x": ((), np.float32)}, 10, limiter={"samples_per_insert": 8, "tolerance": 2})
    with pytest.raises(InvalidRequest, match=r"table.columns\[0\].dtype \(x\)"):
        TableSpec.from_wire({"name": "t", "capacity": 4, "columns": [{"name": "x", "shape": [], "dtype": "object"}]})
    spec = make_spec("t", {"x": ((3,), np.float32)}, 10, sampler="prioritized")
    assert TableSpec.from_wire(spec.to_wire()) == spec


def test_frame_stacks_round_trip_through_their_distinct_frames():
    from kilorl.store.replay.codec import decode_stacks, encode_stacks

    frames = np.random.default_rng(1).integers(0, 255, (10, 6, 5), dtype=np.uint8)
    start = np.where(np.arange(10) < 5, 0, 5)  # two episodes; a first stack repeats its first frame
    stacks = np.stack([frames[np.maximum(np.arange(t - 2, t + 1), start[t])] for t in range(10)])  # k=3
    blob = encode_stacks(stacks, "none")
    # indices, a frame count, then per distinct frame (the 10 frames, each once) its end offset and bytes
    assert len(blob) == 10 * 3 * 4 + 4 + 10 * (4 + 30)
    assert np.array_equal(decode_stacks(blob, "none", 10, 3, (6, 5), np.uint8), stacks)
    bad = bytearray(blob)
    bad[:4] = (10**6).to_bytes(4, "little")  # an index past the frames
    with pytest.raises(ValueError):
        decode_stacks(bytes(bad), "none", 10, 3, (6, 5), np.uint8)


def test_obs_and_next_obs_share_one_pool_of_frames_and_a_pool_decodes_only_the_frames_asked_for():
    """next_obs's stacks are obs's a step on (and at an episode's end, a frame obs never
    holds): the group keeps every distinct frame once, next_obs's bytes are only its indices,
    and decoding frames ``ids`` of the pool gives exactly those frames."""
    from kilorl.store.replay.codec import FramePool, encode_stack_group

    rng = np.random.default_rng(2)
    k, rows = 4, 12
    episodes = [rng.integers(0, 255, (8, 6, 5), dtype=np.uint8), rng.integers(0, 255, (7, 6, 5), dtype=np.uint8)]

    def stack(frames: np.ndarray, t: int) -> np.ndarray:
        return frames[np.maximum(np.arange(t - k + 1, t + 1), 0)]  # a first stack repeats frame 0

    obs, nxt = [], []
    for frames in episodes:  # steps 0..6 of the first episode (it ends at 7), 0..4 of the second
        for t in range(len(frames) - 1 if frames is episodes[0] else 5):
            obs.append(stack(frames, t))
            nxt.append(stack(frames, t + 1))
    obs, nxt = np.stack(obs), np.stack(nxt)
    assert len(obs) == rows
    for name in ("none", "zstd"):
        first, second = encode_stack_group([obs, nxt], name)
        assert len(second) == rows * k * 4  # indices only
        pool = FramePool(first, name, rows, k, (6, 5), np.uint8)
        assert pool.frames == 8 + 6  # the first episode's 8 frames, the second's first 6
        shared = FramePool(second, name, rows, k, (6, 5), np.uint8, owner=pool)
        frames = pool.decode_all()
        assert np.array_equal(frames[pool.index], obs) and np.array_equal(frames[shared.index], nxt)
        some = np.empty((3, 6, 5), np.uint8)
        pool.decode([5, 0, 13], some)
        assert np.array_equal(some, frames[[5, 0, 13]])
        bad = np.frombuffer(second, "<i4").copy()
        bad[-1] = pool.frames  # an index past the pool
        with pytest.raises(ValueError, match="past the 14 frames"):
            FramePool(bad.tobytes(), name, rows, k, (6, 5), np.uint8, owner=pool)


def test_a_table_samples_stacks_or_their_frames_and_both_are_the_inserted_rows():
    """``Table.sample(frames=True)`` (what a worker sends) leaves each distinct frame once with
    the rows' indices into them; stacked, they are the rows ``frames=False`` gives, which
    are the inserted ones."""
    from kilorl.store.client.replay import encode_chunk
    from kilorl.store.replay.chunks import ColumnPart
    from kilorl.store.replay.table import Table

    k, rows = 3, 40
    rng = np.random.default_rng(4)
    frames = rng.integers(0, 255, (rows + k, 5, 4), dtype=np.uint8)
    obs = np.stack([frames[t:t + k] for t in range(rows)])
    nxt = np.stack([frames[t + 1:t + 1 + k] for t in range(rows)])
    spec = make_spec("s", {"obs": ((k, 5, 4), np.uint8), "next_obs": ((k, 5, 4), np.uint8), "a": ((), np.int64)},
                     rows, compression="zstd", chunk_length=8, stacked=("obs", "next_obs"))
    table = Table(spec)
    for lo in range(0, rows, 8):
        n, parts, bufs = encode_chunk(spec, {"obs": obs[lo:lo + 8], "next_obs": nxt[lo:lo + 8],
                                             "a": np.arange(lo, lo + 8)})
        payload = memoryview(b"".join(bytes(b) for b in bufs))
        table.insert([table.decode_chunk(f"c{lo}", n, [ColumnPart(**p) for p in parts], payload)], None, None)
    stacked = table.sample(64, None)
    assert stacked.frame_samples == []
    assert np.array_equal(stacked.columns["obs"], obs[stacked.ids])
    assert np.array_equal(stacked.columns["next_obs"], nxt[stacked.ids])
    pooled = table.sample(64, None, frames=True)
    assert "obs" not in pooled.columns and np.array_equal(pooled.columns["a"], pooled.ids)
    (fs,) = pooled.frame_samples
    assert len(fs.frames) <= 64 * (k + 1)  # a row's obs and next_obs share k - 1 frames
    assert np.array_equal(fs.frames[fs.index["obs"]], obs[pooled.ids])
    assert np.array_equal(fs.frames[fs.index["next_obs"]], nxt[pooled.ids])
