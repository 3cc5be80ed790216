"""Per-column compression of a chunk: zstd, lz4 (both declared dependencies), none.

Each column of a chunk is compressed on its own: columns differ in what compresses (frames
of a game, floats of a state), and a sample needing one column decodes only it. Frames carry
a content checksum (4 bytes), so a corrupt chunk is refused rather than sampled.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kilorl.store.errors import InvalidRequest

_local = threading.local()


def _zstd() -> Any:
    import zstandard

    return zstandard


def _lz4() -> Any:
    try:
        import lz4.frame
    except ImportError:
        raise InvalidRequest("compression: 'lz4' needs the lz4 package (pip install lz4); "
                             "use 'zstd' or 'none'") from None
    return lz4.frame


def compress(data: Any, codec: str, level: int = 3) -> bytes | memoryview:
    """``data`` (bytes-like) encoded with ``codec``; ``none`` returns it as it is."""
    if codec == "none":
        return memoryview(data).cast("B")
    if codec == "zstd":
        cache = _local.__dict__.setdefault("zc", {})
        c = cache.get(level)
        if c is None:
            c = cache[level] = _zstd().ZstdCompressor(level=level, write_checksum=True)
        return c.compress(data)
    if codec == "lz4":
        return _lz4().compress(data, compression_level=level, content_checksum=True)
    raise InvalidRequest(f"compression: unknown codec {codec!r}")


def decompress(data: Any, codec: str, raw_nbytes: int) -> bytes | memoryview:
    """The ``raw_nbytes`` bytes ``data`` encodes; ``ValueError`` when they are not exactly that."""
    if codec == "none":
        out = memoryview(data).cast("B")
    elif codec == "zstd":
        d = _local.__dict__.get("zd")
        if d is None:
            d = _local.zd = _zstd().ZstdDecompressor()
        try:
            out = d.decompress(data, max_output_size=raw_nbytes)
        except _zstd().ZstdError as exc:
            raise ValueError(f"zstd: {exc}") from None
    elif codec == "lz4":
        try:
            out = _lz4().decompress(data)
        except RuntimeError as exc:
            raise ValueError(f"lz4: {exc}") from None
    else:
        raise ValueError(f"unknown codec {codec!r}")
    if len(out) != raw_nbytes:
        raise ValueError(f"decoded {len(out)} bytes, expected {raw_nbytes}")
    return out


def encode_stacks(stacks: np.ndarray, codec: str, level: int = 3) -> bytes:
    """Rows that are stacks of frames (``[rows, k, ...]``, frame stacks of consecutive steps)
    as their distinct frames: a row whose first ``k - 1`` frames are the previous row's last
    ``k - 1`` adds only its newest frame. Encoded as ``rows x k`` int32 frame indices, then
    the frames compressed with ``codec``; ``decode_stacks`` gives the rows back bit for bit."""
    rows, k = stacks.shape[:2]
    flat = stacks.reshape(rows, k, -1)
    follows = np.zeros(rows, bool)
    if rows > 1 and k > 1:
        follows[1:] = np.all(flat[1:, :-1] == flat[:-1, 1:], axis=(1, 2))
    keep = np.ones((rows, k), bool)
    keep[follows, :-1] = False
    index = (np.cumsum(keep.ravel()) - 1).reshape(rows, k).astype("<i4")
    for r in np.flatnonzero(follows).tolist():  # rows of one chunk: its frames come from the row before
        index[r, :-1] = index[r - 1, 1:]
    frames = np.ascontiguousarray(stacks[keep])
    return index.tobytes() + bytes(compress(frames, codec, level))


def decode_stacks(blob: Any, codec: str, rows: int, k: int, frame_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The ``[rows, k, *frame_shape]`` stacks ``encode_stacks`` encoded; ``ValueError`` when
    the indices or the frames do not fit."""
    frames, index = decode_frames(blob, codec, rows, k, frame_shape, dtype)
    return frames[index]


def decode_frames(blob: Any, codec: str, rows: int, k: int, frame_shape: tuple[int, ...],
                  dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``encode_stacks``'s distinct frames ``[F, *frame_shape]`` and its ``[rows, k]`` frame
    indices: a reader that wants a few rows stacks only those (``frames[index[rows]]``)."""
    blob = memoryview(blob).cast("B")
    n = rows * k * 4
    if len(blob) < n:
        raise ValueError(f"{len(blob)} bytes cannot hold {rows * k} frame indices")
    index = np.frombuffer(blob[:n], "<i4").reshape(rows, k)
    frames_n = int(index.max()) + 1 if index.size else 0
    if index.size and index.min() < 0:
        raise ValueError("negative frame index")
    frame_nbytes = int(np.prod(frame_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = decompress(blob[n:], codec, frames_n * frame_nbytes)
    return np.frombuffer(raw, dtype).reshape(frames_n, *frame_shape), index
