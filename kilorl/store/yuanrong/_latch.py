"""Read/write latches of openYuanrong buffers, shared by every client of this process.

openYuanrong latches live in the worker's shared memory. Here a latch is a reader-writer
lock per (worker address, key) in the client process: clients of one process (threads,
a KVClient and an ObjectClient side by side) exclude each other; other processes do not
see these latches (that would need a latch op in the worker).
"""

from __future__ import annotations

import threading
import time

from kilorl.store.yuanrong.errors import DsTimeout


class RWLatch:
    """Many readers or one writer; the writer need not be the thread that unlatches."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not ready():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DsTimeout(f"code: [K_TRY_AGAIN], msg: [{what} latch not acquired within {timeout_s}s]")
                self._cond.wait(remaining)
            if what == "write":
                self._writer = True
            else:
                self._readers += 1

    def rlatch(self, timeout_s: float) -> None:
        self._wait(lambda: not self._writer, timeout_s, "read")

    def wlatch(self, timeout_s: float) -> None:
        self._wait(lambda: not self._writer and self._readers == 0, timeout_s, "write")

    def unrlatch(self) -> None:
        with self._cond:
            self._readers = max(0, self._readers - 1)
            self._cond.notify_all()

    def unwlatch(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


_latches: dict[tuple[str, str], RWLatch] = {}
_lock = threading.Lock()


def latch_for(address: str, key: str) -> RWLatch:
    with _lock:
        latch = _latches.get((address, key))
        if latch is None:
            latch = _latches[(address, key)] = RWLatch()
        return latch
