"""The byte views of the tensors a reader copies versions into (``fetch_into``), made once.

A reader that keeps its model copies every version into the same tensors. Checking a
tensor and taking its bytes (``detach().reshape(-1).view(uint8).numpy()``) costs four
torch calls, about 5 us per tensor, every version. Here that happens once per tensor; a
later version only checks that the same tensor object still has the same storage and
shape. With ``kilorl.params.copy_in`` it makes a warm ``wait`` + ``fetch_into`` of a
5-tensor policy 22 us against 33 us for ``wait`` + ``fetch(share=True)`` on the 2-core VM
(``docs/benchmarks.md``, "Readers copy into the model they keep").

The cache holds the views, and through them the tensors, until its plan is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.params.layout import LayoutError, dtype_from_name

if TYPE_CHECKING:
    import numpy as np
    import torch


class DestinationViews:
    """Per tensor name: the destination tensor last seen, its storage address and its bytes."""

    def __init__(self) -> None:
        self._views: dict[str, tuple[Any, int, tuple[int, ...], np.ndarray]] = {}

    def bytes_of(self, name: str, dtype_name: str, shape: tuple[int, ...], dest: torch.Tensor) -> np.ndarray:
        """``dest``'s bytes as a writable flat uint8 array; LayoutError when it cannot hold
        the slice (another dtype or shape, not contiguous, not on the CPU)."""
        got = self._views.get(name)
        if got is not None and got[0] is dest and got[1] == dest.data_ptr() and got[2] == dest.shape:
            return got[3]
        import torch

        dtype = dtype_from_name(dtype_name)
        if tuple(dest.shape) != shape or dest.dtype != dtype or not dest.is_contiguous() or dest.device.type != "cpu":
            raise LayoutError(f"{name}: destination is {dest.dtype} {list(dest.shape)} on {dest.device}, "
                              f"the slice is {dtype_name} {list(shape)} (contiguous, on cpu)")
        view = dest.detach().reshape(-1).view(torch.uint8).numpy()
        self._views[name] = (dest, dest.data_ptr(), tuple(dest.shape), view)
        return view
