"""Disk (SSD) tier: one spill file per object under a directory, with a byte limit.

It is a cache tier, not durable storage: the directory is wiped at start (durability is
the L2 directory's job, see ``l2.py``).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path


class DiskTier:
    """Spill files named by a counter; ``used`` counts their bytes against ``capacity``."""

    name = "disk"

    def __init__(self, directory: str, capacity: int):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob("*.spill"):
            stale.unlink()
        self.capacity = capacity
        self.used = 0
        self._ids = itertools.count(1)

    def free_bytes(self) -> int:
        return self.capacity - self.used

    def write(self, data: memoryview) -> str:
        path = self.dir / f"{next(self._ids):012d}.spill"
        with open(path, "wb", buffering=0) as f:
            f.write(data)
        self.used += data.nbytes
        return str(path)

    def read_into(self, path: str, target: memoryview) -> None:
        with open(path, "rb", buffering=0) as f:
            n = f.readinto(target)
        if n != target.nbytes:
            raise OSError(f"spill file {path} is short: {n} of {target.nbytes} bytes")

    def remove(self, path: str, size: int) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.used -= size
