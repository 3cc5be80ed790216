"""Publish plans: where each tensor's bytes fall in the shards of a flat parameter vector.

A learner publishes the same shapes every version, so the cut of every tensor into shard
byte ranges is worked out once per set of names, dtypes and shapes, and a publish only takes
byte views of the tensors (4 us instead of 55 for a 5-tensor policy on the 2-core VM): the
store copies each byte once, into its arena. Split from ``store_backed`` (the reader and
writer protocol), which uses it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kilorl.params.layout import FlatLayout, LayoutError

if TYPE_CHECKING:
    import torch

__all__ = ["PublishPlan", "shard_chunks"]


def _numpy_ok(dtype: Any) -> bool:
    """Whether ``Tensor.numpy()`` takes tensors of ``dtype`` (numpy has no bfloat16, float8...)."""
    import torch

    try:
        torch.empty(0, dtype=dtype).numpy()
    except TypeError:
        return False
    return True


class PublishPlan:
    """A layout and where each tensor's bytes fall in its shards, worked out once per set of
    tensor names, dtypes and shapes (a learner publishes the same shapes every version), so a
    publish only takes byte views of the tensors: 4 µs instead of 55 for a 5-tensor policy."""

    def __init__(self, layout: FlatLayout) -> None:
        from kilorl.params.layout import dtype_from_name

        self.layout = layout
        self.record = json.dumps(layout.to_json()).encode()
        """The commit record: the layout as JSON."""
        self._cuts: list[tuple[str, Any, tuple[int, ...], list[tuple[int, int, int]], bool]] = []
        bounds = layout.bounds
        for spec in layout.tensors:
            if not spec.nbytes:
                continue
            cuts, start, end = [], spec.offset, spec.offset + spec.nbytes
            k = bisect.bisect_right(bounds, start) - 1
            while start < end:
                stop = min(end, bounds[k + 1])
                if stop > start:
                    cuts.append((k, start - spec.offset, stop - spec.offset))
                start = stop
                k += 1
            dtype = dtype_from_name(spec.dtype)
            self._cuts.append((spec.name, dtype, spec.shape, cuts, _numpy_ok(dtype)))

    @staticmethod
    def key(tensors: Mapping[str, torch.Tensor], num_shards: int) -> tuple:
        return num_shards, tuple((k, v.dtype, tuple(v.shape)) for k, v in tensors.items())

    def chunks(self, tensors: Mapping[str, torch.Tensor]) -> list[list[memoryview]]:
        """Each shard as byte views, in flat order, of the tensor parts it holds."""
        import torch

        parts: list[list[memoryview]] = [[] for _ in range(self.layout.num_shards)]
        for name, dtype, shape, cuts, numpy_ok in self._cuts:
            t = tensors[name]
            if t.requires_grad:
                t = t.detach()
            if t.dtype != dtype or t.shape != shape:
                raise LayoutError(f"{name}: tensor is {t.dtype} {list(t.shape)}, layout says {dtype} {list(shape)}")
            if not t.is_cpu or not t.is_contiguous():
                t = t.to("cpu").contiguous()
            if numpy_ok:  # a numpy view's bytes: a fifth of torch's reshape + view
                raw = memoryview(t.numpy()).cast("B")
            else:
                raw = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            for k, a, b in cuts:
                parts[k].append(raw[a:b])
        return parts


def shard_chunks(tensors: Mapping[str, torch.Tensor], layout: FlatLayout) -> list[list[memoryview]]:
    """Each writer shard as the byte views, in flat order, of the tensor parts it holds:
    views of the tensors' own memory, stored end to end (a publish copies each byte once,
    into the store's arena)."""
    return PublishPlan(layout).chunks(tensors)
