"""Run a function on W real gloo processes (torch.multiprocessing spawn) and collect results."""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn: Callable[..., Any], world: int, port: int, outdir: str, args: tuple) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(outdir, f"{rank}.pkl").write_bytes(pickle.dumps(result))


def run_workers(fn: Callable[..., Any], *args: Any, world: int = 2, timeout: float = 60.0) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` gloo processes; returns each rank's result, in rank order.

    ``fn`` must be importable (a module-level function); a failure in any rank raises here."""
    with tempfile.TemporaryDirectory() as outdir:
        ctx = mp.start_processes(_entry, args=(fn, world, free_port(), outdir, args), nprocs=world, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"{fn.__name__} did not finish on {world} processes within {timeout} s")
        return [pickle.loads(Path(outdir, f"{r}.pkl").read_bytes()) for r in range(world)]
