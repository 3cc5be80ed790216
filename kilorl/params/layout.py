"""How a parameter version is laid out in bytes, and what part of it a reader wants.

A writer (the learner) concatenates its tensors, each C-contiguous, into one flat byte
vector and cuts that vector into ``M`` contiguous shards (``FlatLayout``). A reader (an
actor, or a learner of another parallel layout) asks per tensor for the full tensor or
for shard ``i`` of ``N`` along dimension ``d`` (``ReaderLayout``). ``kilorl.params.resharding``
turns the pair into byte ranges per writer shard, so a reader moves only the bytes it needs
whatever ``M`` the writer chose.

Nothing here knows about RL, Ray or the store: tensors, shapes and bytes only.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch




@functools.cache
def _dtypes() -> dict[str, torch.dtype]:
    import torch

    return {str(dt).removeprefix("torch."): dt
            for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                       torch.int16, torch.int32, torch.int64, torch.bool)}


SNAP_TO_TENSOR = 0.25
"""How far (a fraction of one shard's size) a writer's shard cut may move to fall between two
tensors. A tensor whole in one shard is a zero-copy view for a reader on the node; one cut in
two is copied (a 20 MB copy into fresh memory costs about 8 ms here, four readers at once on
two cores about 15). Shards stay within 25% of equal; a tensor larger than that margin is
cut where the bytes divide evenly."""


class LayoutError(ValueError):
    """A layout that cannot describe the tensors it is applied to."""


def dtype_from_name(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; unknown names are an error listing the known ones."""
    try:
        return _dtypes()[name]
    except KeyError:
        raise LayoutError(f"unknown dtype {name!r}; known: {sorted(_dtypes())}") from None


@dataclass(frozen=True)
class TensorSpec:
    """One tensor's place in the flat vector: name, dtype, shape and byte offset."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def itemsize(self) -> int:
        return dtype_from_name(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "offset": self.offset}


@dataclass(frozen=True)
class FlatLayout:
    """The writer's side: tensors packed in order, the flat vector cut into shards.

    ``bounds`` has ``num_shards + 1`` increasing byte positions from 0 to ``total_bytes``;
    shard ``k`` holds bytes ``[bounds[k], bounds[k+1])``. Shard boundaries need not fall on
    tensor or element boundaries: readers address bytes, not tensors (``build`` moves a cut
    between two tensors when one is near, so most tensors lie whole in one shard).
    """

    tensors: tuple[TensorSpec, ...]
    bounds: tuple[int, ...]

    @property
    def total_bytes(self) -> int:
        return self.bounds[-1]

    @property
    def num_shards(self) -> int:
        return len(self.bounds) - 1

    def spec(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise LayoutError(f"no tensor {name!r} in the layout (have {[t.name for t in self.tensors][:8]}...)")

    @classmethod
    def build(cls, shapes: Sequence[tuple[str, str, Sequence[int]]], num_shards: int,
              snap: float = SNAP_TO_TENSOR) -> FlatLayout:
        """Pack ``(name, dtype, shape)`` in order and cut the bytes into ``num_shards`` near-equal
        shards, each cut moved to the nearest tensor boundary within ``snap`` of a shard's size."""
        if num_shards < 1:
            raise LayoutError(f"num_shards must be >= 1, got {num_shards}")
        specs, offset, seen = [], 0, set()
        for name, dtype, shape in shapes:
            if name in seen:
                raise LayoutError(f"tensor {name!r} listed twice")
            seen.add(name)
            spec = TensorSpec(name, dtype, tuple(int(s) for s in shape), offset)
            specs.append(spec)
            offset += spec.nbytes
        ends = [spec.offset + spec.nbytes for spec in specs]
        bounds = [0]
        for k in range(1, num_shards):
            cut = offset * k // num_shards
            i = bisect.bisect_left(ends, cut)
            near = min((ends[j] for j in (i - 1, i) if 0 <= j < len(ends)), key=lambda b: abs(b - cut), default=cut)
            if abs(near - cut) <= snap * offset / num_shards and bounds[-1] < near < offset:
                cut = near
            bounds.append(max(cut, bounds[-1]))
        return cls(tuple(specs), (*bounds, offset))

    @classmethod
    def of(cls, tensors: Mapping[str, torch.Tensor], num_shards: int, snap: float = SNAP_TO_TENSOR) -> FlatLayout:
        """The layout of a state dict (in its iteration order)."""
        return cls.build([(k, str(v.dtype).removeprefix("torch."), tuple(v.shape)) for k, v in tensors.items()],
                         num_shards, snap)

    def to_json(self) -> dict:
        return {"tensors": [t.to_json() for t in self.tensors], "bounds": list(self.bounds)}

    @classmethod
    def from_json(cls, data: Mapping) -> FlatLayout:
        try:
            specs = tuple(TensorSpec(t["name"], t["dtype"], tuple(t["shape"]), int(t["offset"])) for t in data["tensors"])
            bounds = tuple(int(b) for b in data["bounds"])
        except (KeyError, TypeError) as exc:
            raise LayoutError(f"malformed layout metadata: {exc!r}") from None
        if not bounds or bounds[0] != 0 or any(b > c for b, c in zip(bounds, bounds[1:])):
            raise LayoutError(f"layout bounds must increase from 0, got {list(bounds)[:8]}")
        return cls(specs, bounds)


@dataclass(frozen=True)
class Full:
    """The whole tensor."""


@dataclass(frozen=True)
class Shard:
    """Part ``index`` of ``count`` along ``dim``, split like ``torch.tensor_split``.

    The first ``size % count`` parts are one row longer, so every row belongs to exactly one
    part and ``count`` may exceed the dimension (trailing parts are then empty).
    """

    index: int
    count: int
    dim: int = 0

    def bounds(self, size: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of a dimension of ``size`` that this part covers."""
        base, extra = divmod(size, self.count)
        start = self.index * base + min(self.index, extra)
        return start, start + base + (1 if self.index < extra else 0)


TensorSlice = Full | Shard
ReaderLayout = Mapping[str, TensorSlice]
"""Tensor name -> what of it the reader wants; tensors not named are not read."""


def validate_slice(spec: TensorSpec, part: TensorSlice) -> None:
    """Raise ``LayoutError`` naming the tensor when ``part`` does not fit ``spec``."""
    if isinstance(part, Full):
        return
    if not isinstance(part, Shard):
        raise LayoutError(f"{spec.name}: a slice is Full() or Shard(index, count, dim), got {part!r}")
    if part.count < 1 or not 0 <= part.index < part.count:
        raise LayoutError(f"{spec.name}: shard index {part.index} of {part.count} is out of range")
    if not 0 <= part.dim < len(spec.shape):
        raise LayoutError(f"{spec.name}: dim {part.dim} out of range for shape {list(spec.shape)}")
