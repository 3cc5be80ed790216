"""The reader's half of the device tier's CUDA IPC path: map a worker's tensor without a copy.

Written for GPU machines and UNTESTED in this repository's CI (no GPU there).
"""

from __future__ import annotations

from typing import Any


def open_ipc_handle(info: dict[str, Any]) -> Any:
    """Client side of ``ipc_handle``: a uint8 CUDA tensor viewing the worker's memory. UNTESTED here."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return rebuild_cuda_tensor(torch.Tensor, (info["numel"],), (1,), 0, torch.UntypedStorage, torch.uint8,
                               info["dev"], info["handle"], info["size"], info["off"], False,
                               info["ref"], info["ref_off"], info["event"], info["sync"])
