"""Process groups and gradient all-reduce over torch.distributed.

gloo on CPU, nccl on NVIDIA GPUs, a vendor backend when its torch plugin registered
one; ``auto`` picks. Gradients are flattened into one buffer so a step costs one
collective, not one per parameter tensor.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def available_backends() -> list[str]:
    names = []
    if dist.is_gloo_available():
        names.append("gloo")
    if dist.is_nccl_available() and torch.cuda.is_available():
        names.append("nccl")
    for name in getattr(dist.Backend, "_plugins", {}):
        names.append(name.lower())
    return names


def resolve_backend(requested: str, device: str) -> str:
    """Map ``auto`` to a concrete backend; reject unknown or unusable ones clearly."""
    have = available_backends()
    if requested == "auto":
        return "nccl" if device.startswith("cuda") and "nccl" in have else "gloo"
    if requested not in have:
        raise ValueError(
            f"communication_backend={requested!r} is not available in this torch build/machine; "
            f"available: {', '.join(have) or 'none'}"
        )
    return requested


def init_process_group(backend: str, rank: int, world_size: int, master_addr: str, master_port: int) -> None:
    if dist.is_initialized():
        return
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )


class GradientAllReducer:
    """Averages the gradients of ``params`` across the default process group."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if self.world_size == 1 or not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n

    def average_scalars(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return (t / self.world_size).tolist()

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Make every rank start from rank 0's weights."""
        if self.world_size == 1:
            return
        for t in module.state_dict().values():
            dist.broadcast(t, src=0)
