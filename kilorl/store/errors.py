"""Errors of the data system, shared by worker and client.

Each error has a short wire code so the worker can report it in a response header and
the client can raise the same class on its side (no pickled exceptions on the wire).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every data-system error."""

    code = "store_error"


class KeyNotFound(StoreError, KeyError):
    """The key does not exist (never set, deleted or expired)."""

    code = "not_found"

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else "key not found"


class StoreFullError(StoreError):
    """No tier had room for the object (after demotion and eviction were tried)."""

    code = "full"


class InvalidRequest(StoreError, ValueError):
    """A request was well-formed on the wire but its fields are invalid."""

    code = "invalid"


class AuthError(StoreError):
    """Wrong or missing token."""

    code = "auth"


class ProtocolError(StoreError):
    """A frame violated the wire protocol; the connection is closed."""

    code = "protocol"


class StoreTimeout(StoreError, TimeoutError):
    """A blocking call (wait_version, receive, back-pressured send) timed out."""

    code = "timeout"


class VersionGone(StoreError, KeyError):
    """The requested version was reclaimed (or never published)."""

    code = "version_gone"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "version gone"


class ConnectionLost(StoreError, ConnectionError):
    """The connection to the worker broke (worker stopped or killed, network failure)."""

    code = "connection_lost"


class WorkerUnreachable(ConnectionLost):
    """The connection broke and no worker (this one again, or another member of its cluster)
    could be reached within the client's ``reconnect_timeout``: the client gave up."""

    code = "unreachable"


class Reconnected(ConnectionLost):
    """The connection broke and was made again, but the operation was not repeated
    (``StoreClient(replay=False)``): the caller decides whether it still makes sense (the
    worker may have restarted with empty memory)."""

    code = "reconnected"


class ConfigError(StoreError, ValueError):
    """A worker or client setting is invalid; the message names the field."""

    code = "config"


class ObjectLost(StoreError, KeyError):
    """The key's bytes were held only by a worker that died (not durable in L2)."""

    code = "lost"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "object lost"


class WorkerLeaving(StoreError):
    """The worker is leaving the cluster and takes no new writes; the client retries elsewhere."""

    code = "leaving"


class StaleCopy(StoreError):
    """A peer was asked for a version of a key it no longer (or not yet) holds."""

    code = "stale"


class KeyExists(StoreError):
    """A set-if-absent found the key already stored (the worker answers ``stored: False``)."""

    code = "exists"


class BatchAborted(StoreError):
    """A pipelined request was skipped because an earlier request of its batch failed."""

    code = "batch_aborted"


_BY_CODE = {cls.code: cls for cls in (StoreError, KeyNotFound, StoreFullError, InvalidRequest, AuthError,
                                      ProtocolError, StoreTimeout, VersionGone, ConfigError, ObjectLost,
                                      WorkerLeaving, StaleCopy, KeyExists, BatchAborted)}


def error_from_code(code: str, message: str) -> StoreError:
    """Rebuilds the client-side exception for a worker error response."""
    return _BY_CODE.get(code, StoreError)(message)
