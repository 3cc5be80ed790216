"""Sparse message encodings: exact round trips, exact sizes, the smaller code chosen, bad bytes refused."""

from __future__ import annotations

import pytest
import torch

from kilorl.comm import encoding as enc


def _sparse(numel: int, density: float, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(numel, generator=g)[: int(density * numel)].sort().values
    return idx, torch.randn(idx.numel(), generator=g).to(dtype)


@pytest.mark.parametrize("index_encoding", ["bitmap", "varint", "coo32", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("density", [0.0, 0.003, 0.3, 1.0])
def test_encode_then_decode_returns_the_same_positions_and_values(index_encoding, dtype, density):
    numel = 10_007  # not a multiple of 8: the bitmap's last byte is partial
    idx, values = _sparse(numel, density, dtype=dtype)
    message = enc.encode(idx, values, numel, index_encoding)
    out = enc.decode(message)
    assert torch.equal(out.indices, idx) and torch.equal(out.values, values) and out.numel == numel
    assert message.numel() == enc.encoded_bytes(idx, numel, dtype, index_encoding)


def test_varint_round_trips_gaps_of_every_byte_length():
    values = torch.tensor([0, 1, 127, 128, 16_383, 16_384, 2**21, 2**35 + 3, 2**62], dtype=torch.int64)
    data = enc.varint_encode(values)
    assert data.numel() == 1 + 1 + 1 + 2 + 2 + 3 + 4 + 6 + 9
    assert torch.equal(enc.varint_decode(data), values)


def test_far_apart_positions_survive_varint():
    numel = 3 * 2**28
    idx = torch.tensor([0, 5, 2**28 + 1, numel - 1])
    out = enc.decode(enc.encode(idx, torch.ones(4), numel, "varint"))
    assert torch.equal(out.indices, idx)


def test_sizes_follow_the_formulas():
    numel = 80_000
    idx, values = _sparse(numel, 0.05)
    assert enc.index_bytes(idx, numel, "bitmap") == numel // 8
    assert enc.index_bytes(idx, numel, "coo32") == 4 * idx.numel()
    # gaps of a 5% random set are almost all < 128: close to one byte per kept entry
    assert idx.numel() <= enc.index_bytes(idx, numel, "varint") < 1.05 * idx.numel()
    assert enc.encode(idx, values.bfloat16(), numel, "bitmap").numel() == enc.HEADER_BYTES + 2 * idx.numel() + numel // 8


@pytest.mark.parametrize(("density", "winner"), [(0.01, "varint"), (0.1, "varint"), (0.2, "bitmap"), (0.3, "bitmap")])
def test_auto_picks_varint_below_about_one_eighth_density_and_bitmap_above(density, winner):
    numel = 100_000
    idx, _ = _sparse(numel, density)
    assert enc.choose_index_encoding(idx, numel) == winner
    sizes = {e: enc.index_bytes(idx, numel, e) for e in ("bitmap", "varint")}
    assert sizes[winner] == min(sizes.values())


def test_users_setting_reaches_the_byte_target():
    """30% kept, bitmap + bf16 values: 0.125 + 0.6 bytes per entry against 4 dense, 82% fewer."""
    numel = 1_000_000
    idx, values = _sparse(numel, 0.3, dtype=torch.bfloat16)
    message = enc.encode(idx, values, numel)
    assert message.numel() / (4 * numel) < 0.19


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda m: m[:20],  # shorter than a header
        lambda m: m[:-1],  # truncated body
        lambda m: torch.cat([m, m[:3]]),  # trailing bytes
        lambda m: torch.cat([torch.tensor([9, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8), m[8:]]),  # unknown index code
    ],
)
def test_malformed_messages_raise_value_error(corrupt):
    idx, values = _sparse(1000, 0.05)
    with pytest.raises(ValueError):
        enc.decode(corrupt(enc.encode(idx, values, 1000, "varint")))
