"""Per-column compression of a chunk: zstd, lz4 (both declared dependencies), none.

Each column of a chunk is compressed on its own: columns differ in what compresses (frames
of a game, floats of a state), and a sample needing one column decodes only it. Frames carry
a content checksum (4 bytes), so a corrupt chunk is refused rather than sampled.
"""

from __future__ import annotations

import threading
from typing import Any

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
