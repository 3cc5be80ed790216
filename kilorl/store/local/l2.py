"""L2: the durable directory behind WRITE_THROUGH_L2 and WRITE_BACK_L2.

One file per key (``<sha256>.obj``: magic, msgpack header with key/meta/size/expiry,
raw payload), written to a temp file, fsynced and renamed, so a crash leaves either the
old or the new file, never a torn one. Write-back entries go through a bounded queue
drained by one flusher thread; a full queue blocks the writer (back-pressure) and a
clean shutdown drains it. A worker restarted on the same directory re-indexes the files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

log = logging.getLogger("kilorl.store.local.l2")
_MAGIC = b"KL2\x01"
_HEAD = struct.Struct("!4sI")


@dataclass
class L2Entry:
    """An object found in the L2 directory at start-up."""

    key: str
    meta: dict[str, Any]
    size: int
    expires_at: float | None
    path: str
    data_offset: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class L2Store:
    """The L2 directory plus its write-back queue and flusher thread."""

    def __init__(self, directory: str, queue_size: int,
                 is_current: Callable[[str, int], bool], may_delete: Callable[[str], bool]):
        self.dir = Path(directory) / "objects"
        self.dir.mkdir(parents=True, exist_ok=True)
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()
        self._is_current = is_current
        self._may_delete = may_delete
        self.lock = threading.Lock()
        # Unbounded queue, writes bounded by slots: deletes (issued under the object lock)
        # never block, writes wait for a slot (back-pressure).
        self.queue: queue.Queue = queue.Queue()
        self._slots = threading.Semaphore(queue_size)
        self.flushed = 0
        self._thread = threading.Thread(target=self._flusher, name="l2-flusher", daemon=True)
        self._thread.start()

    def path_of(self, key: str) -> Path:
        return self.dir / (hashlib.sha256(key.encode()).hexdigest() + ".obj")

    # -- synchronous writes (write-through) ----------------------------------------------
    def write(self, key: str, meta: dict[str, Any], size: int, expires_at: float | None,
              data: memoryview) -> tuple[str, int]:
        """Writes and fsyncs one object; returns (path, payload offset) once it is durable."""
        header = msgpack.packb({"key": key, "meta": meta, "size": size, "exp": expires_at}, use_bin_type=True)
        path = self.path_of(key)
        tmp = path.with_suffix(".tmp")
        with self.lock:
            with open(tmp, "wb", buffering=0) as f:
                f.write(_HEAD.pack(_MAGIC, len(header)) + header)
                f.write(data)
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.dir)
        return str(path), _HEAD.size + len(header)

    def delete(self, key: str) -> None:
        with self.lock:
            try:
                self.path_of(key).unlink()
                _fsync_dir(self.dir)
            except FileNotFoundError:
                pass

    # -- write-back --------------------------------------------------------------------
    def enqueue_write(self, key: str, gen: int, meta: dict[str, Any], size: int, expires_at: float | None,
                      data: memoryview, on_done: Callable[[tuple[str, int] | None], None], timeout: float | None = None) -> None:
        """Queues a write; blocks while the queue is full (back-pressure)."""
        if not self._slots.acquire(timeout=timeout):
            raise TimeoutError("write-back queue full")
        self.queue.put(("w", key, gen, meta, size, expires_at, data, on_done))

    def enqueue_delete(self, key: str) -> None:
        self.queue.put(("d", key))

    def _flusher(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                if item[0] == "w":
                    _, key, gen, meta, size, exp, data, on_done = item
                    wrote = None
                    try:
                        if self._is_current(key, gen):
                            wrote = self.write(key, meta, size, exp, data)
                            self.flushed += 1
                    except Exception:
                        log.exception("write-back of %r failed", key)
                    finally:
                        self._slots.release()
                        on_done(wrote)
                else:
                    if self._may_delete(item[1]):
                        self.delete(item[1])
            finally:
                self.queue.task_done()

    def drain(self) -> None:
        """Blocks until every queued write-back entry is on disk."""
        self.queue.join()

    def close(self) -> None:
        self.drain()
        self.queue.put(None)
        self._thread.join(timeout=30)

    # -- recovery ----------------------------------------------------------------------
    def scan(self) -> list[L2Entry]:
        """Indexes every object file; unreadable files are logged and skipped, never fatal."""
        out = []
        now = time.time()
        for path in self.dir.glob("*.obj"):
            try:
                with open(path, "rb") as f:
                    h, offset = self.read_header(f)
                if path.stat().st_size != offset + h["size"]:
                    raise ValueError("size mismatch")
            except Exception as exc:
                log.warning("skipping unreadable L2 file %s: %s", path, exc)
                continue
            if h["exp"] is not None and h["exp"] <= now:
                path.unlink()
                continue
            out.append(L2Entry(h["key"], h["meta"], h["size"], h["exp"], str(path), offset))
        return out

    @staticmethod
    def read_header(f: Any) -> tuple[dict[str, Any], int]:
        """(header, payload offset) of an object file open at its start; ValueError if corrupt."""
        magic, hlen = _HEAD.unpack(f.read(_HEAD.size))
        if magic != _MAGIC:
            raise ValueError("bad magic")
        return msgpack.unpackb(f.read(hlen), raw=False), _HEAD.size + hlen

    @staticmethod
    def read_into(path: str, offset: int, target: memoryview) -> None:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            n = f.readinto(target)
        if n != target.nbytes:
            raise OSError(f"L2 file {path} is short")
