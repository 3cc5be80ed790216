"""The DRAM tier's memory: one shared-memory arena per worker, and its allocator.

The arena is a file in ``/dev/shm`` mapped by the worker and by every local client, so
object bytes are written and read in place. It is pre-faulted at start: writing into
fresh tmpfs pages is an order of magnitude slower than into touched ones.
"""

from __future__ import annotations

import bisect
import mmap
import os
import secrets
from pathlib import Path

import numpy as np

ALIGN = 64
SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
_PREFIX = "kilorl-store-"


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


class Arena:
    """A shared-memory file mapped read-write; the worker creates it, clients attach."""

    def __init__(self, path: Path, size: int, mm: mmap.mmap, owner: bool):
        self.path = path
        self.size = size
        self.mm = mm
        self.view = memoryview(mm)
        self.owner = owner

    @classmethod
    def create(cls, size: int, prefault: bool = True) -> Arena:
        _remove_stale_arenas()
        path = SHM_DIR / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        _advise_huge(mm)
        if prefault:
            # One write per page allocates every tmpfs page now, not on the first set.
            np.frombuffer(mm, dtype=np.uint8)[::4096] = 0
        return cls(path, size, mm, owner=True)

    @classmethod
    def attach(cls, path: str, size: int) -> Arena:
        fd = os.open(path, os.O_RDWR)
        try:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mm = mmap.mmap(fd, size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        _advise_huge(mm)
        return cls(Path(path), size, mm, owner=False)

    def close(self) -> None:
        if self.owner:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        try:
            self.view.release()
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a view; the mapping goes with the process


def _advise_huge(mm: mmap.mmap) -> None:
    """Asks for transparent huge pages (fewer TLB misses on big reads).

    Takes effect only where the kernel allows THP for shared memory
    (``/sys/kernel/mm/transparent_hugepage/shmem_enabled`` = ``advise`` or ``always``).
    """
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            mm.madvise(advice)
        except OSError:
            pass


def _remove_stale_arenas() -> None:
    """Removes arenas left by workers that were killed (kill -9 cannot unlink)."""
    for p in SHM_DIR.glob(f"{_PREFIX}*-*"):
        try:
            pid = int(p.name[len(_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            try:
                if p.stat().st_uid == os.getuid():
                    p.unlink()
            except OSError:
                pass
