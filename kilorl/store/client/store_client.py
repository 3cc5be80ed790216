"""StoreClient: the native client of a data-system worker.

A connection part (``kilorl.store.client.connection``: sockets, zero-copy leases, fail-over,
the one call primitive) under command groups, each in a module of its own: key-value
(``kv_commands``), versioned objects (``version_commands``), administration, streams and
replay tables (``admin_commands``). Each group works alone over its own connection, as
redis-py's command groups do over ``execute_command``.
"""

from __future__ import annotations

from kilorl.store.client.admin_commands import AdminCommands, ReplayCommands, StreamCommands
from kilorl.store.client.connection import HOME_CHECK_S, Connection
from kilorl.store.client.kv_commands import KVCommands
from kilorl.store.client.version_commands import VersionCommands

__all__ = ["HOME_CHECK_S", "Connection", "StoreClient"]


class StoreClient(KVCommands, VersionCommands, StreamCommands, ReplayCommands, AdminCommands):
    """KV, versioned-object, stream and replay API of one worker. Thread-safe (one connection)."""

    def __enter__(self) -> StoreClient:
        return self
