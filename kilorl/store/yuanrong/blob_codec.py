"""Blobs: openYuanrong's (device pointer, size) pairs as byte views of torch tensors.

openYuanrong's hetero API passes raw device pointers. A raw pointer can be wrapped where
torch can map it (CUDA, through ``__cuda_array_interface__``); elsewhere it is refused
with a clear error, and a tensor is passed instead: ``Blob(tensor)`` or
``Blob(tensor, nbytes)``. A key's blobs are stored as one object
``{"data": uint8 tensor (blobs concatenated), "sizes": int64 tensor}``.
"""

from __future__ import annotations

from typing import Any

from kilorl.store.yuanrong.errors import DsTypeError, DsUnsupported, invalid


class _CudaPointer:
    """Exposes a raw CUDA pointer to ``torch.as_tensor`` (no copy)."""

    def __init__(self, ptr: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of kiloRL's RL side
        raise DsUnsupported("Blob: the hetero API needs torch") from None
    return torch


def check_pointer(dev_ptr: Any, size: Any) -> None:
    """Refuses what cannot be wrapped, at construction time."""
    torch = _torch()
    if isinstance(dev_ptr, torch.Tensor):
        if not dev_ptr.is_contiguous():
            raise invalid("Blob: the tensor must be contiguous")
        if size is not None and (type(size) is not int or not 0 <= size <= dev_ptr.nbytes):
            raise invalid(f"Blob: size {size!r} must be an int within the tensor's {dev_ptr.nbytes} bytes")
        return
    if type(dev_ptr) is not int or type(size) is not int:
        raise DsTypeError("Blob: dev_ptr must be an int device pointer (or a torch tensor) and size an int")
    if size <= 0:
        raise invalid(f"Blob: size must be > 0, got {size}")
    if not torch.cuda.is_available():
        raise DsUnsupported("Blob(dev_ptr, size): raw device pointers can only be wrapped on CUDA, and torch "
                            "has no CUDA device here; pass the tensor itself: Blob(tensor) or Blob(tensor, nbytes)")


def blob_bytes(dev_ptr: Any, size: int | None) -> Any:
    """The blob's memory as a flat uint8 tensor (a view: writes land in the caller's memory)."""
    torch = _torch()
    if isinstance(dev_ptr, torch.Tensor):
        flat = dev_ptr.reshape(-1).view(torch.uint8) if dev_ptr.numel() else torch.empty(0, dtype=torch.uint8)
        return flat if size is None else flat[:size]
    return torch.as_tensor(_CudaPointer(dev_ptr, size), device="cuda")  # UNTESTED here: needs CUDA


def pack(views: list[Any]) -> dict[str, Any]:
    """One object value from a key's blobs (copied to the host side of the store)."""
    torch = _torch()
    sizes = torch.tensor([int(v.numel()) for v in views], dtype=torch.int64)
    data = torch.cat([v.reshape(-1) for v in views]) if views else torch.empty(0, dtype=torch.uint8)
    return {"data": data, "sizes": sizes}


def unpack_into(value: Any, views: list[Any], src_offset: int) -> None:
    """Copies stored bytes from ``src_offset`` on into ``views`` in order; a size mismatch raises."""
    if not isinstance(value, dict) or "data" not in value:
        raise invalid("value is not a hetero object (written by mset_d2h / dev_mset)")
    data = value["data"]
    need = sum(int(v.numel()) for v in views)
    if src_offset < 0 or src_offset + need > int(data.numel()):
        raise invalid(f"blobs need {need} bytes from offset {src_offset}, the object holds {int(data.numel())}")
    pos = src_offset
    for v in views:
        n = int(v.numel())
        v.copy_(data[pos:pos + n])
        pos += n


def sizes_of(value: Any) -> list[int]:
    if not isinstance(value, dict) or "sizes" not in value:
        raise invalid("value is not a hetero object (written by mset_d2h / dev_mset)")
    return [int(s) for s in value["sizes"].tolist()]
