"""Resharding: any reader layout read from any writer layout equals the slice of the original."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kilorl.params import FlatLayout, Full, LayoutError, Shard, pack, plan_read, read_local

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.float16, torch.uint8]


@st.composite
def parameters(draw):
    """A random state dict: 1-5 tensors of 0-3 dims, mixed dtypes, some dims of size 0 or 1."""
    out = {}
    for i in range(draw(st.integers(1, 5))):
        shape = tuple(draw(st.lists(st.integers(0, 7), min_size=0, max_size=3)))
        dtype = draw(st.sampled_from(DTYPES))
        gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=gen).to(dtype)
        else:
            t = torch.randint(0, 200, shape, generator=gen, dtype=dtype)
        out[f"layer{i}.w"] = t
    return out


@st.composite
def reader_layouts(draw, params):
    layout = {}
    for name, t in params.items():
        if not draw(st.booleans()):
            continue  # a reader need not read every tensor
        if t.dim() == 0 or draw(st.booleans()):
            layout[name] = Full()
        else:
            dim = draw(st.integers(0, t.dim() - 1))
            count = draw(st.integers(1, max(1, t.shape[dim] + 1)))
            layout[name] = Shard(draw(st.integers(0, count - 1)), count, dim)
    return layout


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe, dtype-agnostic), including 0-dim tensors."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def expected(t: torch.Tensor, part) -> torch.Tensor:
    if isinstance(part, Full):
        return t
    return torch.tensor_split(t, part.count, dim=part.dim)[part.index]


def draw_read(data):
    """A random state dict, a writer layout of it, a reader layout and the reader's plan."""
    params = data.draw(parameters())
    writer = FlatLayout.of(params, num_shards=data.draw(st.integers(1, 6)))
    reader = data.draw(reader_layouts(params))
    return params, writer, reader, plan_read(writer, reader)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_reader_layout_equals_the_slice_of_the_original(data):
    params, writer, reader, plan = draw_read(data)
    got = read_local(plan, pack(params, writer))
    assert set(got) == set(reader)
    for name, part in reader.items():
        want = expected(params[name], part)
        assert same_bytes(got[name], want), name
    assert plan.bytes_requested == plan.bytes_needed  # max_gap=0 reads nothing extra


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_shared_reads_of_ranges_laid_end_to_end_in_one_buffer_equal_the_slices(data):
    # What a board read hands the reader: every range in one private buffer, end to end from
    # an aligned start. Shared, each slice is a view of that buffer where it can be one.
    params, writer, reader, plan = draw_read(data)
    shards = [bytes(s) for s in pack(params, writer)]
    buf = memoryview(bytearray(64 + plan.bytes_requested))
    segments, at = [], 64
    for r in plan.requests:
        buf[at:at + r.length] = shards[r.shard][r.offset:r.offset + r.length]
        segments.append((writer.bounds[r.shard] + r.offset, buf[at:at + r.length]))
        at += r.length
    got = plan.assemble_segments(segments, share=True)
    assert set(got) == set(reader)
    for name, part in reader.items():
        assert same_bytes(got[name], expected(params[name], part)), name


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_coalescing_gaps_reads_more_bytes_in_fewer_spans_with_equal_results(data):
    params = data.draw(parameters())
    writer = FlatLayout.of(params, num_shards=data.draw(st.integers(1, 4)))
    reader = data.draw(reader_layouts(params))
    exact, loose = plan_read(writer, reader), plan_read(writer, reader, max_gap=64)
    assert loose.num_spans <= exact.num_spans and loose.bytes_requested >= exact.bytes_requested
    a, b = read_local(exact, pack(params, writer)), read_local(loose, pack(params, writer))
    assert set(a) == set(b) and all(same_bytes(a[k], b[k]) for k in a)


def test_a_column_shard_of_a_matrix_reads_only_its_columns():
    w = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
    writer = FlatLayout.of({"w": w, "b": torch.zeros(32)}, num_shards=3)
    plan = plan_read(writer, {"w": Shard(1, 4, dim=1)})
    assert plan.bytes_requested == 64 * 8 * 4  # 64 rows x 8 columns x 4 bytes
    assert len(plan.requests) >= 64  # one run per row (some split at shard bounds)
    assert torch.equal(read_local(plan, pack({"w": w, "b": torch.zeros(32)}, writer))["w"], w[:, 8:16])


def test_a_row_shard_is_one_range_per_writer_shard_it_crosses():
    w = torch.randn(100, 10)
    writer = FlatLayout.of({"w": w}, num_shards=4)  # 1000 bytes per shard
    plan = plan_read(writer, {"w": Shard(0, 2)})  # rows 0-49: bytes 0-1999
    assert [(r.shard, r.offset, r.length) for r in plan.requests] == [(0, 0, 1000), (1, 0, 1000)]
    assert plan.ranges_by_shard() == {0: [(0, 1000)], 1: [(0, 1000)]}


def test_layout_metadata_round_trips_through_json():
    layout = FlatLayout.of({"a": torch.zeros(3, 4), "b": torch.zeros(2, dtype=torch.bfloat16)}, num_shards=2)
    assert FlatLayout.from_json(layout.to_json()) == layout


@pytest.mark.parametrize(
    ("reader", "message"),
    [
        ({"missing": Full()}, "no tensor 'missing'"),
        ({"w": Shard(2, 2)}, "w: shard index 2 of 2"),
        ({"w": Shard(0, 2, dim=2)}, "w: dim 2 out of range"),
        ({"w": "all"}, "w: a slice is Full()"),
    ],
)
def test_bad_reader_layouts_name_the_tensor(reader, message):
    writer = FlatLayout.of({"w": torch.zeros(4, 4)}, num_shards=1)
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_read(writer, reader)


def test_packing_a_tensor_that_does_not_match_the_layout_is_an_error():
    writer = FlatLayout.of({"w": torch.zeros(4, 4)}, num_shards=1)
    with pytest.raises(LayoutError, match=r"w: tensor is torch.float32 \[4, 5\]"):
        pack({"w": torch.zeros(4, 5)}, writer)


def test_assemble_refuses_buffers_of_the_wrong_size():
    writer = FlatLayout.of({"w": torch.zeros(4)}, num_shards=1)
    plan = plan_read(writer)
    with pytest.raises(LayoutError, match="expected 16"):
        plan.assemble([b"\0" * 15])


def test_segments_that_leave_a_needed_byte_uncovered_are_an_error():
    layout = FlatLayout.build([("a", "float32", (4,))], 1)
    plan = plan_read(layout)
    with pytest.raises(LayoutError, match="no segment holds flat byte 8"):
        plan.assemble_segments([(0, bytes(8)), (12, bytes(4))])


def test_a_writer_cut_moves_to_a_tensor_boundary_within_a_quarter_shard():
    # five 4 MB tensors in two shards: the even cut (10 MB) would split the third tensor in
    # two, which a reader on the node must then copy; 8 MB is within a quarter of a shard
    five = {f"t{i}": torch.zeros(1000, 1000) for i in range(5)}
    assert FlatLayout.of(five, 2).bounds == (0, 8_000_000, 20_000_000)
    assert FlatLayout.of(five, 2, snap=0.0).bounds == (0, 10_000_000, 20_000_000)
    # one tensor has no boundary to move to; a far boundary is not taken
    assert FlatLayout.of({"w": torch.zeros(100, 10)}, 4).bounds == (0, 1000, 2000, 3000, 4000)
    assert FlatLayout.of({"a": torch.zeros(1000), "b": torch.zeros(9000)}, 2).bounds == (0, 20_000, 40_000)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=12), shards=st.integers(1, 6))
def test_snapped_cuts_stay_ordered_and_within_a_quarter_shard_of_even(sizes, shards):
    layout = FlatLayout.of({f"t{i}": torch.zeros(n) for i, n in enumerate(sizes)}, shards)
    total = 4 * sum(sizes)
    assert layout.bounds[0] == 0 and layout.bounds[-1] == total and len(layout.bounds) == shards + 1
    assert all(a <= b for a, b in zip(layout.bounds, layout.bounds[1:]))
    for k, cut in enumerate(layout.bounds[1:-1], 1):
        assert abs(cut - total * k // shards) <= 0.25 * total / shards
