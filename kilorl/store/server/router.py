"""The one interface through which a worker's local operations reach other workers.

A worker alone uses the base ``Router`` (every hook a no-op). A multi-node layer gives the
worker its own router (``Worker.set_router``); the op handlers call the hooks at fixed
points, so what ``get`` or ``set`` does never depends on the order anything was
installed in. Hooks are called for user keys only: versioned objects have their own.
"""

from __future__ import annotations

from typing import Any

from kilorl.store.local.entries import ReadHandle
from kilorl.store.server.version_book import VersionBook


class Router:
    """Hooks the op handlers call; this base class is the behaviour of a worker alone."""

    def begin_write(self) -> None:
        """Before a user-key write takes its payload (a leaving worker refuses here)."""

    def end_write(self) -> None:
        """After the write of ``begin_write`` finished or failed."""

    def announce(self, key: str, if_absent: bool = False) -> bool:
        """A user key was stored locally: make it the current value everywhere.

        ``if_absent``: only if no other value of the key exists anywhere (a set-if-absent
        that won locally); False means another one did, and the local value must go."""
        return True

    def forward_atomic(self, key: str, header: dict[str, Any]) -> dict[str, Any] | None:
        """Runs a read-modify-write op (``incr``) on the worker that decides for ``key`` and
        returns its reply; None: that is this worker (the op runs here)."""
        return None

    def ensure_local(self, key: str, timeout: float | None) -> bool:
        """Makes ``key`` readable from the local store if it exists anywhere.

        Returns True when the router itself waited up to ``timeout`` for the key (the
        local read must then not wait again), False to let the local store wait."""
        return False

    def on_delete(self, keys: list[str], present: set[str], deleted_here: int) -> int:
        """``keys`` were deleted locally (``present`` were here); returns how many existed."""
        return deleted_here

    def exists_elsewhere(self, key: str) -> bool:
        """Whether another worker holds ``key`` (asked only when the local store lacks it)."""
        return False

    def list_keys(self, prefix: str, local: list[str]) -> list[str]:
        """All keys under ``prefix`` wherever they are held, given the local ones."""
        return local

    def describe_remote(self, key: str) -> tuple[dict[str, Any], int] | None:
        """(meta, size) of a key held elsewhere, without moving its bytes; None if unknown."""
        return None

    def read_range(self, key: str, offset: int, length: int) -> ReadHandle | None:
        """``length`` bytes at ``offset`` of a key held elsewhere, pulled into this worker
        (only those bytes move); the handle owns them. None: the key is nowhere else."""
        return None

    def versions(self) -> VersionBook | None:
        """The mesh-wide history of published names; None: the worker's own table."""
        return None

    def info(self) -> dict[str, Any] | None:
        """Status of the multi-node layer for ``stats``; None when the worker is alone."""
        return None

    def hello_fields(self) -> dict[str, Any]:
        """Extra fields of the hello reply (e.g. other members, for client failover)."""
        return {}


