"""Values <-> (meta, payload): bytes, str, numpy arrays, torch tensors, dicts of them.

The meta is a small msgpack-able dict travelling in the frame header; the payload is the
raw bytes, laid out so that decoding is a view (no copy): array data is 64-byte aligned.
Nothing here ever pickles. torch is imported only when a tensor is involved.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilorl.store.errors import InvalidRequest

_ALIGN = 64


@dataclass
class Encoded:
    """An encoded value: meta for the header, and (offset, bytes) parts of the payload."""

    meta: dict[str, Any]
    parts: list[tuple[int, memoryview]]
    nbytes: int

    def write_into(self, target: memoryview) -> None:
        """Copies the parts into ``target`` (one memcpy per part; byte memoryviews both sides,
        a third of the cost of numpy views of them for a small part)."""
        dst = target.cast("B") if target.format != "B" or target.ndim != 1 else target
        for off, part in self.parts:
            n = part.nbytes
            if n:
                dst[off:off + n] = part if part.format == "B" and part.ndim == 1 else part.cast("B")

    def buffers(self) -> list[memoryview]:
        """The payload as a list of buffers for a socket send (padding included)."""
        out: list[memoryview] = []
        pos = 0
        for off, part in self.parts:
            if off > pos:
                out.append(memoryview(bytes(off - pos)))
            out.append(part)
            pos = off + part.nbytes
        if self.nbytes > pos:
            out.append(memoryview(bytes(self.nbytes - pos)))
        return out


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and type(value).__name__ in ("Tensor", "Parameter")


def _array_part(value: Any) -> tuple[str, str, list[int], memoryview]:
    """(kind, dtype, shape, raw bytes) of an ndarray or tensor, made contiguous if needed."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise InvalidRequest(f"value: numpy arrays of dtype {value.dtype} (objects) cannot be stored")
        arr = np.ascontiguousarray(value)
        return "ndarray", arr.dtype.str, list(arr.shape), memoryview(arr.reshape(-1).view(np.uint8))
    if _is_tensor(value):
        import torch

        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        flat = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        return "tensor", str(t.dtype).removeprefix("torch."), list(t.shape), memoryview(flat.numpy())
    raise InvalidRequest(f"value: unsupported type {type(value).__name__}")


def encode(value: Any) -> Encoded:
    """Encodes a value; unsupported types raise InvalidRequest naming the type."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        mv = memoryview(value).cast("B") if not isinstance(value, bytes) else memoryview(value)
        return Encoded({"k": "bytes"}, [(0, mv)], mv.nbytes)
    if isinstance(value, (list, tuple)):
        return _gather(value)
    if isinstance(value, str):
        mv = memoryview(value.encode())
        return Encoded({"k": "str"}, [(0, mv)], mv.nbytes)
    if isinstance(value, np.ndarray) or _is_tensor(value):
        kind, dtype, shape, mv = _array_part(value)
        return Encoded({"k": kind, "dt": dtype, "sh": shape}, [(0, mv)], mv.nbytes)
    if isinstance(value, dict):
        entries, parts, pos = [], [], 0
        for name, item in value.items():
            if not isinstance(name, str):
                raise InvalidRequest(f"value: dict keys must be str, got {type(name).__name__}")
            if isinstance(item, (bytes, bytearray, memoryview)):
                kind, dtype, shape, mv = "bytes", "", [], memoryview(item).cast("B")
            else:
                try:
                    kind, dtype, shape, mv = _array_part(item)
                except InvalidRequest:
                    raise InvalidRequest(f"value[{name!r}]: unsupported type {type(item).__name__}") from None
            pos = (pos + _ALIGN - 1) // _ALIGN * _ALIGN
            entries.append([name, kind, dtype, shape, pos, mv.nbytes])
            parts.append((pos, mv))
            pos += mv.nbytes
        return Encoded({"k": "dict", "e": entries}, parts, pos)
    raise InvalidRequest(f"value: unsupported type {type(value).__name__} "
                         "(use bytes, str, numpy arrays, torch tensors, a dict of them or a list of byte chunks)")


def _gather(chunks: list[Any] | tuple[Any, ...]) -> Encoded:
    """A list of byte buffers stored as their concatenation (no padding, no joined copy):
    a writer hands views of its own memory and reads back one ``bytes`` value whose byte
    ranges are the chunks' bytes end to end."""
    parts, pos = [], 0
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise InvalidRequest(f"value[{i}]: a list value is byte chunks (bytes, bytearray, memoryview), "
                                 f"got {type(chunk).__name__}")
        if isinstance(chunk, memoryview) and not chunk.c_contiguous:
            raise InvalidRequest(f"value[{i}]: a byte chunk must be contiguous (a strided view has no flat bytes)")
        if isinstance(chunk, memoryview) and chunk.format == "B" and chunk.ndim == 1:
            mv = chunk  # already flat bytes (a writer's views): no new view
        else:
            mv = memoryview(chunk).cast("B") if not isinstance(chunk, bytes) else memoryview(chunk)
        parts.append((pos, mv))
        pos += mv.nbytes
    return Encoded({"k": "bytes"}, parts, pos)


def _decode_array(kind: str, dtype: str, shape: list[int], buf: memoryview, offset: int, nbytes: int) -> Any:
    if kind == "ndarray":
        dt = np.dtype(dtype)
        arr = np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize if dt.itemsize else 0, offset=offset)
        arr = arr.reshape(shape)
        arr.flags.writeable = False
        return arr
    import torch

    tdt = getattr(torch, dtype)
    if nbytes == 0:
        return torch.empty(shape, dtype=tdt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on read-only buffers; tensors are views
        t = torch.frombuffer(buf, dtype=tdt, count=nbytes // torch.empty(0, dtype=tdt).element_size(),
                             offset=offset)
    return t.reshape(shape)


def _bytes_view(buf: memoryview, offset: int, nbytes: int) -> memoryview:
    """A read-only memoryview that keeps ``buf`` alive (``toreadonly()`` would not)."""
    arr = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=offset)
    arr.flags.writeable = False
    return memoryview(arr)


def decode(meta: dict[str, Any], buf: memoryview) -> Any:
    """Decodes a payload; arrays, tensors and bytes are views of ``buf`` (no copy).

    ``buf`` keeps whatever owns the memory alive (a leased arena slice or a received
    bytearray), so views stay valid as long as the caller holds them.
    """
    kind = meta.get("k")
    if kind == "bytes":
        return _bytes_view(buf, 0, buf.nbytes)
    if kind == "str":
        return bytes(buf).decode()
    if kind in ("ndarray", "tensor"):
        return _decode_array(kind, meta["dt"], meta["sh"], buf, 0, buf.nbytes)
    if kind == "dict":
        out = {}
        for name, k, dtype, shape, off, n in meta["e"]:
            out[name] = _bytes_view(buf, off, n) if k == "bytes" else _decode_array(k, dtype, shape, buf, off, n)
        return out
    raise InvalidRequest(f"meta: unknown value kind {kind!r}")


def decode_device(meta: dict[str, Any], flat: Any) -> Any:
    """Decodes from a flat uint8 device tensor (CUDA IPC path): tensors stay on the device,
    numpy/bytes entries are copied to the host. UNTESTED here (needs a GPU)."""
    import torch

    def tensor_at(dtype: str, shape: list[int], off: int, n: int) -> Any:
        return flat[off:off + n].view(getattr(torch, dtype)).reshape(shape)

    kind = meta.get("k")
    if kind == "tensor":
        return tensor_at(meta["dt"], meta["sh"], 0, flat.numel())
    if kind == "dict":
        out = {}
        for name, k, dtype, shape, off, n in meta["e"]:
            if k == "tensor":
                out[name] = tensor_at(dtype, shape, off, n)
            else:
                host = memoryview(flat[off:off + n].cpu().numpy())
                out[name] = decode({"k": k, "dt": dtype, "sh": shape}, host)
        return out
    return decode(meta, memoryview(flat.cpu().numpy()))


def describe(meta: dict[str, Any], size: int) -> dict[str, Any]:
    """What a stored value is, from its meta alone: ``type`` and ``size``; for arrays and
    tensors their ``dtype`` and ``shape``; for a dict, every entry's ``kind``, ``dtype``,
    ``shape``, byte ``offset`` in the payload and ``nbytes`` (to compute byte ranges)."""
    kind = meta.get("k")
    out: dict[str, Any] = {"type": kind, "size": size}
    if kind in ("ndarray", "tensor"):
        out.update(dtype=meta["dt"], shape=list(meta["sh"]), offset=0, nbytes=size)
    elif kind == "dict":
        out["entries"] = {name: {"kind": k, "dtype": dtype or None, "shape": list(shape), "offset": off, "nbytes": n}
                          for name, k, dtype, shape, off, n in meta["e"]}
    elif kind not in ("bytes", "str"):
        raise InvalidRequest(f"meta: unknown value kind {kind!r}")
    return out
