"""The shared-memory arena: one file in ``/dev/shm`` mapped by a worker and its local clients.

Object bytes are written and read in place through this mapping, so it is part of the
wire between a worker and a client on its host. The worker pre-faults it: writing into
fresh tmpfs pages is an order of magnitude slower than into touched ones (64 MiB: 55 ms
against 8 ms here). It does so in a background thread at the lowest CPU priority
(``populate_in_background``: ``MADV_POPULATE_WRITE``, which never changes a byte, so values
stored meanwhile are safe), so a worker starting beside Ray and the roles does not take
their CPU: a synchronous prefault of 256 MiB costs 0.25 s of CPU at start.
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
from pathlib import Path

import numpy as np

from kilorl.store.errors import ConfigError

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
_PREFIX = "kilorl-store-"


class Arena:
    """A shared-memory file mapped read-write; the worker creates it, clients attach."""

    def __init__(self, path: Path, size: int, mm: mmap.mmap, owner: bool):
        self.path = path
        self.size = size
        self.mm = mm
        self.view = memoryview(mm)
        self.owner = owner
        self.populated = threading.Event()
        """Set once every page is pre-faulted (at creation, or by ``populate_in_background``)."""

    @classmethod
    def create(cls, size: int, prefault: bool = True) -> Arena:
        _remove_stale_arenas()
        free = _free_bytes(SHM_DIR)
        if size > free:  # tmpfs pages past its limit would SIGBUS the worker on first touch
            raise ConfigError(f"a shared-memory arena of {size:,} bytes does not fit in {SHM_DIR} ({free:,} bytes "
                             f"free): lower --shm-size (store.shm_size) or enlarge {SHM_DIR}")
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
        arena = cls(path, size, mm, owner=True)
        if prefault:
            arena.populated.set()
        return arena

    def populate_in_background(self, chunk: int = 32 << 20) -> threading.Thread | None:
        """Pre-faults every page from a daemon thread at nice 19, chunk by chunk; None where the
        kernel has no ``MADV_POPULATE_WRITE`` (Linux < 5.14: pages then fault on first write)."""
        advice = getattr(mmap, "MADV_POPULATE_WRITE", 23 if os.uname().sysname == "Linux" else None)
        if advice is None:
            return None

        def run() -> None:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux)
            except (OSError, AttributeError):
                pass
            for start in range(0, self.size, chunk):
                try:
                    self.mm.madvise(advice, start, min(chunk, self.size - start))
                except (OSError, ValueError):  # unsupported, or the arena closed meanwhile
                    return
            self.populated.set()

        t = threading.Thread(target=run, name="arena-populate", daemon=True)
        t.start()
        return t

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


def _free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize
