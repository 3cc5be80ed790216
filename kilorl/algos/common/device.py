"""Where a learner's tensors live."""

from __future__ import annotations

import torch


def pick_device(want: str) -> torch.device:
    """``train.device``: ``cuda`` must exist; ``auto`` takes it when it does; else the CPU."""
    device = torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but torch sees no CUDA device; use train.device=cpu or auto")
    return device
