"""The DRAM tier's allocator: first-fit over the worker's shared-memory arena.

The arena mapping itself (``Arena``) is in ``kilorl.store.wire.shm``: it is the contract
between a worker and the local clients that map the same file.
"""

from __future__ import annotations

import bisect

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


class Allocator:
    """First-fit allocator over ``[0, capacity)`` with coalescing of free neighbours."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._starts: list[int] = [0]
        self._free: dict[int, int] = {0: capacity}
        self._used: dict[int, int] = {}
        self.used_bytes = 0

    def alloc(self, size: int) -> int | None:
        need = _align(max(size, 1))
        for start in self._starts:
            block = self._free[start]
            if block >= need:
                i = bisect.bisect_left(self._starts, start)
                del self._starts[i]
                del self._free[start]
                if block > need:
                    rest = start + need
                    self._starts.insert(i, rest)
                    self._free[rest] = block - need
                self._used[start] = need
                self.used_bytes += need
                return start
        return None

    def free(self, offset: int) -> None:
        size = self._used.pop(offset)
        self.used_bytes -= size
        i = bisect.bisect_left(self._starts, offset)
        # Merge with the next free block.
        if i < len(self._starts) and self._starts[i] == offset + size:
            size += self._free.pop(self._starts[i])
            del self._starts[i]
        # Merge with the previous free block.
        if i > 0:
            prev = self._starts[i - 1]
            if prev + self._free[prev] == offset:
                self._free[prev] += size
                return
        self._starts.insert(i, offset)
        self._free[offset] = size

    def largest_free(self) -> int:
        return max(self._free.values(), default=0)
