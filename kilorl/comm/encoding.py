"""Byte encodings of a sparse gradient: which positions are kept, and their values.

Int32 indices on 30% of the entries cost as much as the fp32 values themselves, so the
index part decides whether sparsification saves anything. Three index codes:

- ``bitmap``: one bit per entry, ``ceil(n / 8)`` bytes whatever the density.
- ``varint``: gaps between consecutive kept positions, LEB128 varints (7 bits per byte);
  a gap below 128 costs one byte, so at density ``p`` it costs about ``p * n`` bytes
  while ``p > 1/128``, more below.
- ``coo32``: raw int32 positions, ``4 * k`` bytes (the baseline the others beat).

Bitmap is smaller than varint above a density of about 1/8 (one byte per kept entry
against one bit per entry); ``auto`` computes both sizes exactly and takes the smaller.
Values go as float32 or bfloat16. Everything is vectorised torch, so it runs on the
device that holds the gradient (CPU or GPU); nothing loops over entries in Python.

Message layout (uint8): a 32-byte header of four int64 ``[codes, numel, nnz, index_bytes]``,
the values, then the index bytes (values first keeps them aligned for ``view``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

HEADER_BYTES = 32
INDEX_CODES = {"bitmap": 0, "varint": 1, "coo32": 2}
_INDEX_NAMES = {v: k for k, v in INDEX_CODES.items()}
VALUE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_VALUE_CODES = {torch.float32: 0, torch.bfloat16: 1}
_VALUE_BY_CODE = {v: k for k, v in _VALUE_CODES.items()}
_BIT_WEIGHTS = [1 << b for b in range(8)]
_MAX_VARINT_BYTES = 10  # 64 bits / 7 bits per byte, rounded up


@dataclass(frozen=True)
class SparseMessage:
    """A decoded message: sorted positions (int64) and their values, out of ``numel``."""

    indices: torch.Tensor
    values: torch.Tensor
    numel: int
    index_encoding: str


def varint_lengths(values: torch.Tensor) -> torch.Tensor:
    """Bytes each non-negative int64 takes as a LEB128 varint (0 takes one byte)."""
    lengths = torch.ones_like(values)
    top_bits = int(values.max()).bit_length() if values.numel() else 0
    for shift in range(7, top_bits, 7):  # only as many passes as the largest value needs
        lengths += (values >> shift) > 0
    return lengths


def varint_encode(values: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """LEB128 of non-negative int64 values, as one uint8 tensor (vectorised by byte rank).

    ``lengths``: :func:`varint_lengths` of ``values`` when the caller has it already."""
    values = values.to(torch.int64)
    if values.numel() == 0:
        return torch.empty(0, dtype=torch.uint8, device=values.device)
    lengths = varint_lengths(values) if lengths is None else lengths
    starts = torch.cumsum(lengths, 0) - lengths
    out = torch.empty(int(starts[-1] + lengths[-1]), dtype=torch.uint8, device=values.device)
    out[starts] = ((values & 0x7F) | ((lengths > 1).to(torch.int64) << 7)).to(torch.uint8)
    for j in range(1, int(lengths.max())):  # the few multi-byte values, one byte rank at a time
        sel = torch.nonzero(lengths > j).flatten()
        byte = (values[sel] >> (7 * j)) & 0x7F
        byte |= (lengths[sel] > j + 1).to(torch.int64) << 7
        out[starts[sel] + j] = byte.to(torch.uint8)
    return out


def varint_decode(data: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`varint_encode`; raises on a truncated or oversized varint."""
    if data.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=data.device)
    b = data.to(torch.int64)
    is_end = (b & 0x80) == 0
    if not bool(is_end[-1]):
        raise ValueError("varint data ends inside a value (last byte has the continuation bit)")
    ends = torch.nonzero(is_end).flatten()
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    value_id = torch.cumsum(is_end.to(torch.int64), 0) - is_end.to(torch.int64)
    rank = torch.arange(b.numel(), device=b.device) - starts[value_id]
    if int(rank.max()) >= _MAX_VARINT_BYTES:
        raise ValueError("varint longer than 10 bytes (not an int64)")
    out = torch.zeros(ends.numel(), dtype=torch.int64, device=b.device)
    return out.scatter_add_(0, value_id, (b & 0x7F) << (7 * rank))


def bitmap_encode(indices: torch.Tensor, numel: int) -> torch.Tensor:
    """One bit per entry (little-endian within a byte, like ``np.packbits(bitorder='little')``)."""
    bits = torch.zeros(-(-numel // 8) * 8, dtype=torch.uint8, device=indices.device)
    bits[indices] = 1
    weights = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=indices.device)
    return (bits.view(-1, 8) * weights).sum(1, dtype=torch.uint8)


def bitmap_decode(data: torch.Tensor, numel: int) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.uint8, device=data.device)
    bits = ((data.unsqueeze(1) >> shifts) & 1).flatten()[:numel]
    return torch.nonzero(bits).flatten()


def index_bytes(indices: torch.Tensor, numel: int, encoding: str) -> int:
    """Exact size of the index part, without building it."""
    if encoding == "bitmap":
        return -(-numel // 8)
    if encoding == "coo32":
        return 4 * indices.numel()
    if encoding == "varint":
        return int(varint_lengths(_gaps(indices)).sum()) if indices.numel() else 0
    raise ValueError(f"index_encoding={encoding!r}; expected one of auto, {', '.join(INDEX_CODES)}")


def choose_index_encoding(indices: torch.Tensor, numel: int) -> str:
    """The smaller of bitmap and varint for these positions (ties go to bitmap: cheaper to build)."""
    return "bitmap" if index_bytes(indices, numel, "bitmap") <= index_bytes(indices, numel, "varint") else "varint"


def _gaps(indices: torch.Tensor) -> torch.Tensor:
    """Sorted positions -> gaps minus one (first: the position itself), all >= 0."""
    prev = torch.cat([indices.new_full((1,), -1), indices[:-1]])
    return indices - prev - 1


def encode(indices: torch.Tensor, values: torch.Tensor, numel: int, index_encoding: str = "auto") -> torch.Tensor:
    """One uint8 message for sorted, unique ``indices`` and their ``values`` (fp32 or bf16)."""
    if values.dtype not in _VALUE_CODES:
        raise ValueError(f"values dtype {values.dtype} cannot be encoded; use float32 or bfloat16")
    if indices.numel() != values.numel():
        raise ValueError(f"{indices.numel()} indices but {values.numel()} values")
    indices = indices.to(torch.int64)
    gaps = lengths = None
    if index_encoding in ("auto", "varint"):
        gaps = _gaps(indices)
        lengths = varint_lengths(gaps)
    if index_encoding == "auto":  # the smaller of the two; ties go to bitmap (cheaper to build)
        index_encoding = "bitmap" if -(-numel // 8) <= int(lengths.sum()) else "varint"
    if index_encoding == "bitmap":
        index_part = bitmap_encode(indices, numel)
    elif index_encoding == "varint":
        index_part = varint_encode(gaps, lengths)
    elif index_encoding == "coo32":
        index_part = indices.to(torch.int32).view(torch.uint8)
    else:
        raise ValueError(f"index_encoding={index_encoding!r}; expected one of auto, {', '.join(INDEX_CODES)}")
    codes = INDEX_CODES[index_encoding] | (_VALUE_CODES[values.dtype] << 8)
    header = torch.tensor([codes, numel, indices.numel(), index_part.numel()], dtype=torch.int64, device=indices.device)
    return torch.cat([header.view(torch.uint8), values.contiguous().view(torch.uint8), index_part])


def encoded_bytes(indices: torch.Tensor, numel: int, value_dtype: torch.dtype, index_encoding: str) -> int:
    """Size of :func:`encode`'s message, computed without building it."""
    if index_encoding == "auto":
        index_encoding = choose_index_encoding(indices, numel)
    item = torch.empty(0, dtype=value_dtype).element_size()
    return HEADER_BYTES + item * indices.numel() + index_bytes(indices, numel, index_encoding)


def decode(message: torch.Tensor) -> SparseMessage:
    """Inverse of :func:`encode`; a malformed message raises ``ValueError`` (never reads past it)."""
    if message.dtype != torch.uint8 or message.numel() < HEADER_BYTES:
        raise ValueError(f"a sparse message is uint8 of at least {HEADER_BYTES} bytes")
    codes, numel, nnz, n_index = message[:HEADER_BYTES].clone().view(torch.int64).tolist()
    index_code, value_code = codes & 0xFF, codes >> 8
    if index_code not in _INDEX_NAMES or value_code not in _VALUE_BY_CODE or min(numel, nnz, n_index) < 0 or nnz > numel:
        raise ValueError(f"malformed sparse message header {[codes, numel, nnz, n_index]}")
    dtype = _VALUE_BY_CODE[value_code]
    n_values = nnz * torch.empty(0, dtype=dtype).element_size()
    if message.numel() != HEADER_BYTES + n_values + n_index:
        raise ValueError(f"sparse message is {message.numel()} bytes, header says {HEADER_BYTES + n_values + n_index}")
    values = message[HEADER_BYTES : HEADER_BYTES + n_values].clone().view(dtype)
    index_part = message[HEADER_BYTES + n_values :]
    name = _INDEX_NAMES[index_code]
    if name == "bitmap":
        indices = bitmap_decode(index_part, numel)
    elif name == "varint":
        indices = torch.cumsum(varint_decode(index_part) + 1, 0) - 1
    else:
        indices = index_part.clone().view(torch.int32).to(torch.int64)
    if indices.numel() != nnz or (nnz and (int(indices[-1]) >= numel or int(indices[0]) < 0)):
        raise ValueError(f"sparse message positions do not match its header (nnz={nnz}, numel={numel})")
    return SparseMessage(indices, values, numel, name)
