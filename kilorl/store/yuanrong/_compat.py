"""Value views and the one place this layer needs more than the public ``StoreClient`` API.

``read_range`` reads a byte range of one value with ``StoreClient.get_range`` (a zero-copy
view of only the range; from a remote holder only those bytes move). ``exists_many`` asks
for many keys in one request (``StoreClient.exists_many``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kilorl.store.client import StoreClient
from kilorl.store.yuanrong.errors import DsRuntimeError, invalid, translated


def as_bytes_view(value: Any) -> memoryview:
    """A flat byte view of a stored value (bytes, str, ndarray, tensor) without copying."""
    if isinstance(value, memoryview):
        return value.cast("B") if value.format != "B" or value.ndim != 1 else value
    if isinstance(value, (bytes, bytearray)):
        return memoryview(value)
    if isinstance(value, str):
        return memoryview(value.encode())
    if isinstance(value, np.ndarray):
        return memoryview(np.ascontiguousarray(value).reshape(-1).view(np.uint8))
    if type(value).__module__.startswith("torch"):
        import torch

        flat = value.detach().cpu().contiguous().reshape(-1)
        return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")
    raise DsRuntimeError(f"code: [K_INVALID], msg: [the value is a {type(value).__name__} (e.g. a dict of "
                         "tensors written by kiloRL code); read it with the native StoreClient]")


def read_range(store: StoreClient, key: str, offset: int, length: int) -> memoryview:
    """Bytes ``[offset, offset + length)`` of ``key``'s value (``KeyNotFound`` if absent)."""
    if offset < 0 or length < 0:
        raise invalid(f"read range [{offset}, {offset + length}) of {key!r}: offset and size must be >= 0")
    with translated():
        return as_bytes_view(store.get_range(key, offset, length))


def exists_many(store: StoreClient, keys: list[str]) -> list[bool]:
    """Existence of each key, in one request."""
    with translated():
        return store.exists_many(keys)
