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
    """One stacked column's chunk on its own: ``encode_stack_group([stacks])``."""
    return encode_stack_group([stacks], codec, level)[0]


def encode_stack_group(group: list[np.ndarray], codec: str, level: int = 3) -> list[bytes]:
    """Columns of rows that are stacks of frames (each ``[rows, k, ...]``, consecutive steps;
    the same frame shape and dtype, e.g. obs and next_obs) as one pool of distinct frames.
    A row whose first ``k - 1`` frames are the previous row's last ``k - 1`` adds only its
    newest frame, and a frame met again (next_obs's frames are obs's a step on; an episode's
    first stack repeats its first frame) is kept once. The first column's blob holds its
    ``rows x k`` int32 frame indices, the pool's frames each compressed with ``codec`` on
    its own (with their end offsets), so a sample decodes only the frames of the rows it
    takes (``FramePool``); each other column's blob holds only its indices into that pool.
    The first blob: ``rows x k`` int32 indices, int32 ``F``, ``F`` int32 end offsets, frames."""
    pool: dict[bytes, int] = {}
    frames: list[np.ndarray] = []
    indices = []
    for stacks in group:
        rows, k = stacks.shape[:2]
        flat = stacks.reshape(rows, k, -1)
        follows = np.zeros(rows, bool)
        if rows > 1 and k > 1:
            follows[1:] = np.all(flat[1:, :-1] == flat[:-1, 1:], axis=(1, 2))
        index = np.empty((rows, k), "<i4")
        for r in range(rows):
            if follows[r]:  # its frames but the newest come from the row before
                index[r, :-1] = index[r - 1, 1:]
            for j in range(k - 1 if follows[r] else 0, k):
                key = flat[r, j].tobytes()
                at = pool.setdefault(key, len(frames))
                if at == len(frames):
                    frames.append(flat[r, j])
                index[r, j] = at
        indices.append(index)
    parts = [compress(f, codec, level) for f in frames]
    ends = np.cumsum([len(p) for p in parts], dtype=np.int64).astype("<i4")
    count = np.array([len(frames)], "<i4")
    return [b"".join([indices[0].tobytes(), count.tobytes(), ends.tobytes(), *parts]),
            *(i.tobytes() for i in indices[1:])]


class FramePool:
    """A stacked column of one chunk as ``encode_stack_group`` stored it: its ``[rows, k]``
    frame indices and the pool of distinct frames (its own, or the group's first column's),
    each frame encoded on its own. Parsed once (views of the blob, no copy); ``decode``
    decodes only the frames asked for."""

    def __init__(self, blob: Any, codec: str, rows: int, k: int, frame_shape: tuple[int, ...], dtype: Any,
                 owner: FramePool | None = None) -> None:
        """``owner``: the pool of the group's first column (then ``blob`` is indices only).
        ``ValueError`` when the indices or the frame offsets do not fit the blob."""
        blob = memoryview(blob).cast("B")
        n = rows * k * 4
        if len(blob) < n or (owner is not None and len(blob) != n):
            raise ValueError(f"{len(blob)} bytes do not hold {rows * k} frame indices"
                             + (" alone (a column sharing another's frames)" if owner is not None else ""))
        index = np.frombuffer(blob[:n], "<i4").reshape(rows, k)
        if index.size and index.min() < 0:
            raise ValueError("negative frame index")
        self.index = index
        if owner is not None:
            if index.size and int(index.max()) >= owner.frames:
                raise ValueError(f"frame index {int(index.max())} past the {owner.frames} frames of the pool")
            self.frames, self.offsets, self.data = owner.frames, owner.offsets, owner.data
            self.codec, self.frame_shape, self.dtype, self.frame_nbytes = (owner.codec, owner.frame_shape,
                                                                           owner.dtype, owner.frame_nbytes)
            self.owner: FramePool = owner
            return
        self.owner = self
        if len(blob) < n + 4:
            raise ValueError(f"{len(blob)} bytes cannot hold {rows * k} frame indices and a frame count")
        self.frames = int(np.frombuffer(blob[n:n + 4], "<i4")[0])
        if self.frames < 0 or len(blob) < n + 4 + 4 * self.frames:
            raise ValueError(f"{len(blob)} bytes cannot hold {rows * k} frame indices and {self.frames} offsets")
        if index.size and int(index.max()) >= self.frames:
            raise ValueError(f"frame index {int(index.max())} past the {self.frames} frames of the pool")
        ends = np.frombuffer(blob[n + 4:n + 4 + 4 * self.frames], "<i4")
        self.offsets = np.concatenate(([0], ends)).astype(np.int64)
        self.data = blob[n + 4 + 4 * self.frames:]
        if np.any(np.diff(self.offsets) < 0) or self.offsets[-1] != len(self.data):
            raise ValueError(f"frame offsets do not cover the {len(self.data)} bytes of frames")
        self.codec, self.frame_shape = codec, tuple(frame_shape)
        self.dtype = np.dtype(dtype)
        self.frame_nbytes = int(np.prod(frame_shape, dtype=np.int64)) * self.dtype.itemsize

    def decode(self, ids: Any, out: np.ndarray) -> None:
        """Frames ``ids`` (pool indices) decoded into the rows of ``out`` (``[len(ids), ...]``,
        C-contiguous); ``ValueError`` when a frame does not decode to exactly its size. The loop
        is the sample's hot path: a frame costs one C call and one copy."""
        dest = memoryview(out).cast("B")
        offs, data, nb = self.offsets.tolist(), self.data, self.frame_nbytes
        if self.codec != "zstd":
            for row, f in enumerate(ids):
                dest[row * nb:(row + 1) * nb] = decompress(data[offs[f]:offs[f + 1]], self.codec, nb)
            return
        d = _local.__dict__.get("zd")
        if d is None:
            d = _local.zd = _zstd().ZstdDecompressor()
        row = f = 0
        try:
            for row, f in enumerate(ids):
                dest[row * nb:(row + 1) * nb] = d.decompress(data[offs[f]:offs[f + 1]], max_output_size=nb)
        except (_zstd().ZstdError, ValueError) as exc:  # ValueError: a frame of the wrong size
            raise ValueError(f"zstd frame {f} does not decode to its {nb} bytes ({exc})") from None

    def decode_all(self) -> np.ndarray:
        """Every frame of the pool, ``[F, *frame_shape]`` (an arriving chunk's check)."""
        out = np.empty((self.frames, *self.frame_shape), self.dtype)
        self.decode(range(self.frames), out)
        return out


def decode_stacks(blob: Any, codec: str, rows: int, k: int, frame_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The ``[rows, k, *frame_shape]`` stacks ``encode_stacks`` encoded; ``ValueError`` when
    the indices or the frames do not fit."""
    pool = FramePool(blob, codec, rows, k, frame_shape, dtype)
    return pool.decode_all()[pool.index]
