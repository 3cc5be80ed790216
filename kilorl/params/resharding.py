"""Parameter resharding: read any reader layout from any writer layout through byte ranges.

``plan_read(writer, reader)`` lists the byte ranges, per writer shard, that hold exactly the
bytes the reader asked for (``ReadPlan.requests``); the caller fetches them however it likes
(``StoreClient.get_version(name, v, ranges=...)`` per shard, or slicing in-memory shards)
and ``ReadPlan.assemble`` builds the reader's tensors from what came back.

A slice along dimension ``d > 0`` is ``prod(shape[:d])`` separate runs in the flat vector;
runs that touch are merged into one span before they are split at shard boundaries, and
``max_gap`` lets a reader trade a few unneeded bytes for fewer ranges (a request has a fixed
cost). With ``max_gap=0`` the bytes requested equal the bytes of the slices, no more.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.params.destinations import DestinationViews
from kilorl.params.layout import FlatLayout, Full, LayoutError, ReaderLayout, Shard, TensorSpec, dtype_from_name, validate_slice

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RangeRequest:
    """Bytes ``[offset, offset + length)`` of writer shard ``shard``."""

    shard: int
    offset: int
    length: int


@dataclass(frozen=True)
class _Piece:
    """What one output tensor needs: ``outer`` runs of ``run_len`` bytes, ``stride`` apart."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    outer: int
    stride: int
    run_len: int

    @property
    def end(self) -> int:
        return self.start + (self.outer - 1) * self.stride + self.run_len if self.outer and self.run_len else self.start


@dataclass(frozen=True)
class _Span:
    """A contiguous flat byte range read as one or more requests (split at shard bounds)."""

    start: int
    end: int
    first_request: int
    num_requests: int


def _piece(spec: TensorSpec, part: Full | Shard) -> _Piece:
    if isinstance(part, Full) or not spec.shape:
        return _Piece(spec.name, spec.dtype, spec.shape, spec.offset, 1, spec.nbytes, spec.nbytes)
    lo, hi = part.bounds(spec.shape[part.dim])
    inner = math.prod(spec.shape[part.dim + 1:]) * spec.itemsize
    outer = math.prod(spec.shape[:part.dim])
    shape = spec.shape[:part.dim] + (hi - lo,) + spec.shape[part.dim + 1:]
    row = spec.shape[part.dim] * inner
    run_len = (hi - lo) * inner
    if hi - lo == spec.shape[part.dim]:  # the whole dimension: one contiguous run
        outer, run_len, row = 1, outer * row, outer * row
    return _Piece(spec.name, spec.dtype, shape, spec.offset + lo * inner, outer, row, run_len)


def _runs(pieces: Sequence[_Piece]) -> list[tuple[int, int]]:
    """Every (start, end) byte run of every piece, sorted."""
    runs: list[tuple[int, int]] = []
    for p in pieces:
        if p.run_len == 0 or p.outer == 0:
            continue
        starts = p.start + p.stride * np.arange(p.outer, dtype=np.int64)
        runs.extend(zip(starts.tolist(), (starts + p.run_len).tolist()))
    runs.sort()
    return runs


class ReadPlan:
    """The byte ranges a reader fetches and how they become its tensors."""

    def __init__(self, writer: FlatLayout, pieces: list[_Piece], max_gap: int) -> None:
        self.pieces = pieces
        self._bounds = writer.bounds
        self.requests: list[RangeRequest] = []
        self._spans: list[_Span] = []
        self._one_view: list[tuple[str, int, int, np.dtype, tuple[int, ...], int]] | None = None
        """Per piece (name, flat start, bytes, numpy dtype, shape, item size), when every
        piece can be a view of one buffer (whole rows, numpy dtypes); [] when not."""
        self._dests = DestinationViews()
        """The byte views of the tensors ``out`` gave last (a reader copies into the same ones)."""
        for start, end in self._merge(_runs(pieces), max_gap):
            first = len(self.requests)
            self.requests.extend(_split_at_bounds(writer.bounds, start, end))
            self._spans.append(_Span(start, end, first, len(self.requests) - first))

    @staticmethod
    def _merge(runs: list[tuple[int, int]], max_gap: int) -> list[tuple[int, int]]:
        merged: list[list[int]] = []
        for start, end in runs:
            if merged and start <= merged[-1][1] + max_gap:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [(s, e) for s, e in merged]

    @property
    def num_spans(self) -> int:
        """Contiguous flat byte ranges read (each split into requests at shard bounds)."""
        return len(self._spans)

    @property
    def bytes_requested(self) -> int:
        return sum(r.length for r in self.requests)

    @property
    def bytes_needed(self) -> int:
        return sum(p.outer * p.run_len for p in self.pieces)

    def ranges_by_shard(self) -> dict[int, list[tuple[int, int]]]:
        """``{shard: [(offset, length), ...]}`` in request order, for one fetch per shard."""
        out: dict[int, list[tuple[int, int]]] = {}
        for r in self.requests:
            out.setdefault(r.shard, []).append((r.offset, r.length))
        return out

    def assemble(self, buffers: Sequence[object], out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Build the reader's tensors from ``buffers[i]``, the bytes of ``requests[i]``.

        With ``out`` (name -> contiguous CPU tensor of the slice's shape and dtype, e.g. a
        model's parameters) the bytes are copied straight into those tensors: one copy from
        the store's buffer to the model, none in between.
        """
        if len(buffers) != len(self.requests):
            raise LayoutError(f"assemble needs {len(self.requests)} buffers, got {len(buffers)}")
        views = [np.frombuffer(memoryview(b).cast("B"), dtype=np.uint8) for b in buffers]
        for r, v in zip(self.requests, views):
            if v.size != r.length:
                raise LayoutError(f"buffer for shard {r.shard} at {r.offset} has {v.size} bytes, expected {r.length}")
        return self.assemble_segments([(self._bounds[r.shard] + r.offset, v) for r, v in zip(self.requests, views)], out)

    def assemble_segments(self, segments: Sequence[tuple[int, object]],
                          out: Mapping[str, torch.Tensor] | None = None, share: bool = False) -> dict[str, torch.Tensor]:
        """Build the reader's tensors from disjoint ``(flat_offset, bytes)`` segments of the
        writer's vector that cover every byte the plan needs (e.g. a shard stored as pieces).

        Every byte is copied once, from its segment into the destination tensor; a tensor
        that crosses segments is filled piece by piece, never through a joined buffer. With
        ``share`` (and no ``out``), a tensor that is one contiguous, aligned run of one
        segment is a view of it instead: no copy, and it keeps the segment alive.
        """
        segs = sorted(((int(o), np.frombuffer(_bytes_view(b), dtype=np.uint8)) for o, b in segments), key=_first)
        if share and out is None:
            segs = _join_adjacent(segs)
            if len(segs) == 1 and segs[0][1].flags.writeable:  # a board read: one private copy
                views = self._views_of_one(*segs[0])
                if views is not None:
                    return views
        starts = [o for o, _ in segs]
        views = [v for _, v in segs]
        addrs = [v.__array_interface__["data"][0] for v in views] if share and out is None else []
        tensors = {}
        for p in self.pieces:
            view = self._view(p, starts, views, addrs) if share and out is None else None
            tensors[p.name] = view if view is not None else self._tensor(
                p, starts, views, None if out is None else out.get(p.name))
        return tensors

    def destination_bytes(self, p: _Piece, dest: torch.Tensor) -> np.ndarray:
        """``dest``'s bytes, to copy piece ``p`` into (``LayoutError`` if it cannot hold it)."""
        return self._dests.bytes_of(p.name, p.dtype, p.shape, dest)

    def _views_of_one(self, start: int, seg: np.ndarray) -> dict[str, torch.Tensor] | None:
        """Every piece as a view of ``seg`` (flat bytes from ``start``), or None when one cannot
        be: the common case of a board read, with the per-piece work worked out once."""
        import torch

        if self._one_view is None:
            recipe = []
            for p in self.pieces:
                np_dtype = _numpy_dtype(p.dtype)
                if p.outer != 1 or not p.run_len or np_dtype is None:
                    recipe = []
                    break
                recipe.append((p.name, p.start, p.run_len, np_dtype, p.shape, np_dtype.itemsize))
            self._one_view = recipe
        if not self._one_view:
            return None
        addr, end = seg.__array_interface__["data"][0], start + seg.size
        out = {}
        for name, p_start, n, np_dtype, shape, item in self._one_view:
            off = p_start - start
            if off < 0 or p_start + n > end or (addr + off) % item:
                return None
            out[name] = torch.from_numpy(seg[off:off + n].view(np_dtype).reshape(shape))
        return out

    @staticmethod
    def _view(p: _Piece, starts: list[int], views: list[np.ndarray], addrs: list[int]) -> torch.Tensor | None:
        """``p`` as a view of its segment, when it is one contiguous, aligned run of one.

        The store hands its buffers out read-only; torch has no read-only tensors, so the
        view is writable in principle and callers must only read it (as ``share`` says)."""
        import torch

        if p.outer != 1 or not p.run_len:
            return None
        i = bisect.bisect_right(starts, p.start) - 1
        if i < 0 or p.end > starts[i] + views[i].size:
            return None
        dtype = dtype_from_name(p.dtype)
        if (addrs[i] + p.start - starts[i]) % dtype.itemsize:  # the segment's address, not ndarray.ctypes (slow)
            return None
        run = views[i][p.start - starts[i]:p.start - starts[i] + p.run_len]
        if run.flags.writeable:  # a private copy (a board read): no warning to silence
            np_dtype = _numpy_dtype(p.dtype)
            if np_dtype is not None:  # shaped in numpy: a third of the cost of three torch ops
                return torch.from_numpy(run.view(np_dtype).reshape(p.shape))
            return torch.from_numpy(run).view(dtype).reshape(p.shape)
        with warnings.catch_warnings():  # "the given NumPy array is not writable": known, see above
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(run).view(dtype).reshape(p.shape)

    def _tensor(self, p: _Piece, starts: list[int], views: list[np.ndarray], dest: torch.Tensor | None) -> torch.Tensor:
        if dest is None:
            import torch

            dest = torch.empty(p.shape, dtype=dtype_from_name(p.dtype))
            out = dest.reshape(-1).view(torch.uint8).numpy()
        else:
            out = self.destination_bytes(p, dest)
        if not out.size:
            return dest
        i = bisect.bisect_right(starts, p.start) - 1
        if i >= 0 and p.end <= starts[i] + views[i].size:  # the whole piece in one segment: one (strided) copy
            base = views[i][p.start - starts[i]:]
            if p.outer == 1:
                out[:] = base[:p.run_len]
            elif base.size >= p.outer * p.stride:
                out.reshape(p.outer, p.run_len)[:] = base[:p.outer * p.stride].reshape(p.outer, p.stride)[:, :p.run_len]
            else:  # the last row ends before a whole stride: a strided view of exactly the rows
                rows = np.lib.stride_tricks.as_strided(base, shape=(p.outer, p.run_len), strides=(p.stride, 1))
                out.reshape(p.outer, p.run_len)[:] = rows
        elif p.outer == 1 or p.stride == p.run_len:  # contiguous bytes across segments
            _copy_bytes(out, p.start, starts, views)
        else:
            for k in range(p.outer):
                _copy_bytes(out[k * p.run_len:(k + 1) * p.run_len], p.start + k * p.stride, starts, views)
        return dest


_NUMPY_DTYPES: dict[str, np.dtype | None] = {}


def _numpy_dtype(name: str) -> np.dtype | None:
    """numpy's dtype of the same name, or None where numpy has none (bfloat16, float8)."""
    if name not in _NUMPY_DTYPES:
        try:
            _NUMPY_DTYPES[name] = np.dtype(name) if name != "bool" else np.dtype(np.bool_)
        except TypeError:
            _NUMPY_DTYPES[name] = None
    return _NUMPY_DTYPES[name]


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def _bytes_view(b: Any) -> memoryview:
    """``b`` as a flat byte memoryview (the store's buffers already are one: no new view)."""
    if isinstance(b, memoryview) and b.format == "B" and b.ndim == 1:
        return b
    return memoryview(b).cast("B")


def _join_adjacent(segs: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    """Segments that follow each other in the flat vector *and* in one buffer (a board read
    copies every range into one) as one segment, so a tensor cut between them is a view."""
    if len(segs) < 2:
        return segs
    out = [segs[0]]
    prev_root, prev_addr = _root(segs[0][1]), segs[0][1].__array_interface__["data"][0]
    for start, view in segs[1:]:
        root, addr = _root(view), view.__array_interface__["data"][0]
        prev_start, prev = out[-1]
        if prev_start + prev.size == start and root is not None and root is prev_root and prev_addr + prev.size == addr:
            whole = root if isinstance(root, np.ndarray) and root.dtype == np.uint8 and root.ndim == 1 \
                else np.frombuffer(root, dtype=np.uint8)
            at = prev_addr - whole.__array_interface__["data"][0]
            out[-1] = (prev_start, whole[at:at + prev.size + view.size])
        else:
            out.append((start, view))
            prev_addr = addr
        prev_root = root
    return out


def _root(view: np.ndarray) -> object | None:
    """The object that owns a frombuffer view's memory (a memoryview's exporter)."""
    base = view.base
    return base.obj if isinstance(base, memoryview) else base


def _copy_bytes(dst: np.ndarray, start: int, starts: list[int], views: list[np.ndarray]) -> None:
    """Fill ``dst`` with flat bytes ``[start, start + len(dst))`` from consecutive segments."""
    pos, n = 0, dst.size
    i = bisect.bisect_right(starts, start) - 1
    while pos < n:
        at = start + pos
        if i < 0 or i >= len(views) or not starts[i] <= at < starts[i] + views[i].size:
            raise LayoutError(f"no segment holds flat byte {at} (segments must cover every needed byte)")
        off = at - starts[i]
        take = min(n - pos, views[i].size - off)
        dst[pos:pos + take] = views[i][off:off + take]
        pos += take
        i += 1


def _split_at_bounds(bounds: Sequence[int], start: int, end: int) -> list[RangeRequest]:
    out = []
    k = bisect.bisect_right(bounds, start) - 1
    while start < end:
        while bounds[k + 1] <= start:  # skip empty shards
            k += 1
        stop = min(end, bounds[k + 1])
        out.append(RangeRequest(k, start - bounds[k], stop - start))
        start = stop
    return out


def plan_read(writer: FlatLayout, reader: ReaderLayout | None = None, max_gap: int = 0) -> ReadPlan:
    """Byte ranges of ``writer``'s shards that hold ``reader``'s slices (all tensors, full, when None)."""
    if max_gap < 0:
        raise LayoutError(f"max_gap must be >= 0, got {max_gap}")
    if reader is None:
        reader = {t.name: Full() for t in writer.tensors}
    pieces = []
    for name, part in reader.items():
        spec = writer.spec(name)
        validate_slice(spec, part)
        pieces.append(_piece(spec, part))
    return ReadPlan(writer, pieces, max_gap)


def pack(tensors: Mapping[str, torch.Tensor], layout: FlatLayout) -> list[memoryview]:
    """The writer's shards of ``tensors`` as byte views of one packed buffer."""
    import torch

    flat = np.empty(layout.total_bytes, dtype=np.uint8)
    for spec in layout.tensors:
        t = tensors[spec.name].detach().to("cpu").contiguous()
        if tuple(t.shape) != spec.shape or str(t.dtype).removeprefix("torch.") != spec.dtype:
            raise LayoutError(f"{spec.name}: tensor is {t.dtype} {list(t.shape)}, layout says {spec.dtype} {list(spec.shape)}")
        flat[spec.offset:spec.offset + spec.nbytes] = t.reshape(-1).view(torch.uint8).numpy()
    mv = memoryview(flat)
    return [mv[a:b] for a, b in zip(layout.bounds, layout.bounds[1:])]


def read_local(plan: ReadPlan, shards: Sequence[object]) -> dict[str, torch.Tensor]:
    """Execute ``plan`` against in-memory shards (tests, single-process stores)."""
    views = [memoryview(s).cast("B") for s in shards]
    return plan.assemble([views[r.shard][r.offset:r.offset + r.length] for r in plan.requests])
