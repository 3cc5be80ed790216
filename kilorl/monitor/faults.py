"""Fault injection: a memory leak on purpose, to exercise leak detection and migration.

Configured through ``monitor.inject_leaks`` (docs/monitor.md, "Fault injection"); never
active unless a run asks for it. The leak is real: touched bytes that stay resident, so
the role's RSS grows exactly as with a leaking library.

Each chunk is an anonymous mapping of its own, not a malloc'd bytes object: a role that keeps
freed heap for reuse (``train.retain_freed_memory_mb`` raises glibc's mmap threshold to 32 MiB)
would otherwise keep a stopped leak's chunks resident, and what ``stop`` frees would depend on
the allocator's state.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import time


def _touched_mapping(n: int) -> mmap.mmap:
    """``n`` bytes of anonymous memory, every page written (resident, not a lazy reservation)."""
    buf = mmap.mmap(-1, n)
    view = (ctypes.c_char * n).from_buffer(buf)
    ctypes.memset(view, 0x5A, n)
    del view  # releases the buffer export, so the mapping can be closed
    return buf


class LeakInjector:
    """Allocates ``bytes_per_s`` of resident memory in a daemon thread until :meth:`stop`."""

    def __init__(self, bytes_per_s: float, start_after_s: float = 0.0, tick_s: float = 0.1) -> None:
        if bytes_per_s <= 0:
            raise ValueError(f"LeakInjector: 'bytes_per_s' must be > 0, got {bytes_per_s}")
        self.bytes_per_s, self.start_after_s, self.tick_s = bytes_per_s, start_after_s, tick_s
        self._held: list[mmap.mmap] = []
        self.allocated_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeakInjector:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kilorl-leak-injector", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        if self._stop.wait(self.start_after_s):
            return
        t0 = time.monotonic()
        while not self._stop.wait(self.tick_s):
            due = int(self.bytes_per_s * (time.monotonic() - t0)) - self.allocated_bytes
            if due > 0:
                self._held.append(_touched_mapping(due))
                self.allocated_bytes += due

    def stop(self) -> None:
        """Stop leaking and free what was held."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        for chunk in self._held:
            chunk.close()  # unmapped: back to the OS whatever the allocator keeps
        self._held.clear()
