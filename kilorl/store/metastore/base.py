"""The metastore contract: a small etcd-shaped key-value store for cluster metadata.

Cluster membership and the hash ring need exactly what etcd v3 offers, so the
interface follows its semantics and both backends must behave identically:

- one global, monotonically increasing **revision**; every write gets a new one;
  each key records ``create_revision``, ``mod_revision`` and ``version``;
- **compare-and-swap** on a key's ``mod_revision`` (0 means "key absent");
- **leases** with a TTL, kept alive by the holder; when one expires or is revoked
  every key attached to it is deleted (that is how a dead worker disappears);
- **watches** on a prefix, optionally replaying from a past revision, delivering
  every change in revision order (lease expiry shows up as DELETE events).

Keys and values are bytes. Callers own their key layout (prefixes).
"""

from __future__ import annotations

import abc
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

EventType = Literal["PUT", "DELETE"]


class MetastoreError(Exception):
    """Base class of metastore failures."""


class MetastoreClosed(MetastoreError):
    """This client was closed; nothing more will work through it."""


class MetastoreUnavailable(MetastoreError):
    """The backend cannot be reached (etcd down, connection refused, timeout)."""


class LeaseNotFound(MetastoreError):
    """The lease expired or was revoked: its keys are gone; the holder must start over."""


class CompactedError(MetastoreError):
    """A watch asked to replay from a revision older than the retained history."""


class WatchClosed(MetastoreError):
    """The watch was cancelled or its stream ended."""


@dataclass(frozen=True)
class KeyValue:
    """One key's value and bookkeeping, as of a revision."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True)
class RangeResult:
    """Keys under a prefix, all read at the same store ``revision`` (a consistent snapshot)."""

    kvs: list[KeyValue]
    revision: int


@dataclass(frozen=True)
class CasResult:
    """Outcome of a compare-and-swap: on failure ``current`` is what is there now (or None)."""

    succeeded: bool
    revision: int
    current: KeyValue | None


@dataclass(frozen=True)
class Lease:
    """A granted lease; ``ttl`` is what the server granted (it may round up)."""

    id: int
    ttl: int


@dataclass(frozen=True)
class WatchEvent:
    """A change: for DELETE, ``kv.value`` is empty and ``kv.mod_revision`` is the delete's revision."""

    type: EventType
    kv: KeyValue


def check_key(key: bytes, field: str = "key") -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"{field} must be bytes, got {type(key).__name__}")
    if not key:
        raise ValueError(f"{field} must not be empty")
    return bytes(key)


def check_value(value: bytes) -> bytes:
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"value must be bytes, got {type(value).__name__}")
    return bytes(value)


def check_ttl(ttl: float) -> int:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ValueError(f"ttl must be a number of seconds > 0, got {ttl!r}")
    # Leases are whole seconds, like etcd; round up so a holder never gets less.
    return max(1, int(-(-ttl // 1)))


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's range_end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # etcd: key=\0, range_end=\0 means "all keys"


class Watch:
    """A stream of events for one prefix; read with ``get()`` or iterate; ``close()`` when done.

    Events are grouped per revision batch as the backend delivers them. Backends
    push into the internal queue; a terminal error is delivered after pending events.
    """

    _END = object()

    def __init__(self, prefix: bytes):
        self.prefix = prefix
        self._queue: queue.Queue = queue.Queue()
        self._closed = threading.Event()
        self._error: MetastoreError | None = None

    # -- backend side --------------------------------------------------------------------
    def push(self, events: list[WatchEvent]) -> None:
        if events and not self._closed.is_set():
            self._queue.put(events)

    def fail(self, error: MetastoreError) -> None:
        if self._error is None:
            self._error = error
        self._queue.put(self._END)

    # -- consumer side -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def get(self, timeout: float | None = None) -> list[WatchEvent] | None:
        """The next batch of events, or None on timeout; raises once the watch has ended."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is self._END:
            self._queue.put(self._END)  # stay terminal for later calls
            raise self._error or WatchClosed(f"watch on {self.prefix!r} closed")
        return item

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            try:
                batch = self.get()
            except WatchClosed:
                return
            yield from batch or ()

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._cancel()
            self.fail(WatchClosed(f"watch on {self.prefix!r} closed"))

    def _cancel(self) -> None:
        """Backend hook: stop producing events."""

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Metastore(abc.ABC):
    """Cluster metadata store with etcd v3 semantics (see the module docstring)."""

    @abc.abstractmethod
    def get(self, key: bytes) -> KeyValue | None:
        """The key's current value, or None."""

    @abc.abstractmethod
    def range(self, prefix: bytes) -> RangeResult:
        """All keys starting with ``prefix``, sorted, read at one revision."""

    @abc.abstractmethod
    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Write unconditionally; returns the new revision. ``lease`` 0 means none."""

    @abc.abstractmethod
    def delete(self, key: bytes) -> bool:
        """Delete one key; True if it existed."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: bytes) -> int:
        """Delete every key under ``prefix``; returns how many."""

    @abc.abstractmethod
    def compare_and_swap(self, key: bytes, expected_mod_revision: int, value: bytes, lease: int = 0) -> CasResult:
        """Write only if the key's ``mod_revision`` equals ``expected_mod_revision`` (0: absent)."""

    @abc.abstractmethod
    def compare_and_delete(self, key: bytes, expected_mod_revision: int) -> CasResult:
        """Delete only if the key's ``mod_revision`` equals ``expected_mod_revision``."""

    @abc.abstractmethod
    def grant_lease(self, ttl: float) -> Lease:
        """A new lease that expires ``ttl`` seconds (rounded up) after the last keepalive."""

    @abc.abstractmethod
    def keepalive(self, lease_id: int) -> int:
        """Refresh a lease; returns its TTL. Raises LeaseNotFound if it already expired."""

    @abc.abstractmethod
    def revoke(self, lease_id: int) -> None:
        """End a lease now, deleting its keys. Raises LeaseNotFound if unknown."""

    @abc.abstractmethod
    def lease_time_to_live(self, lease_id: int) -> int:
        """Seconds left on a lease; -1 if it is unknown or expired."""

    @abc.abstractmethod
    def watch(self, prefix: bytes, start_revision: int = 0) -> Watch:
        """Watch every change under ``prefix``; from ``start_revision`` if > 0, else from now.

        When this returns, the watch is registered: no later change is missed.
        Raises CompactedError if ``start_revision`` is older than the retained history.
        """

    @abc.abstractmethod
    def revision(self) -> int:
        """The store's current revision."""

    def close(self) -> None:  # noqa: B027 - optional hook: most backends have something to release
        """Release connections and background threads."""

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
