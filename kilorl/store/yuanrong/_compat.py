"""The two places where this layer needs more than today's public ``StoreClient`` API.

COMPAT SHIM (switch after the data-system v2 merge): ``read_range`` reads a byte range of
one value. With ``StoreClient.get_range(key, offset, length)`` available it uses that (a
zero-copy view of only the range); until then it falls back to a full ``get`` and a slice.
``exists_many`` asks for many keys in one request; it uses the worker's multi-key
``exists`` op when the client exposes a way to send it, else one request per key.
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
    get_range = getattr(store, "get_range", None)
    with translated():
        if get_range is not None:
            return as_bytes_view(get_range(key, offset, length))
        view = as_bytes_view(store.get(key))  # FALLBACK: full get + slice
    if offset < 0 or length < 0 or offset + length > view.nbytes:
        raise invalid(f"read range [{offset}, {offset + length}) is outside the value of {key!r} "
                      f"({view.nbytes} bytes)")
    return view[offset:offset + length]


def exists_many(store: StoreClient, keys: list[str]) -> list[bool]:
    """Existence of each key, in one request where possible."""
    call = getattr(store, "_call", None)
    with translated():
        if call is not None:
            try:
                return [bool(f) for f in call({"op": "exists", "keys": list(keys)})[0]["found"]]
            except (KeyError, TypeError):
                pass  # the wire shape changed: fall back to the public per-key call
        return [store.exists(k) for k in keys]
