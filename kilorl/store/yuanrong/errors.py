"""openYuanrong's error types on kiloRL's store errors.

openYuanrong's SDK raises ``RuntimeError`` for runtime failures and ``TypeError`` for
arguments of the wrong type. Every error this layer raises is an instance of one of those
*and* of the matching kiloRL error, so ``except RuntimeError`` (ported code) and
``except KeyNotFound`` (kiloRL code) both work. Messages follow openYuanrong's
``code: [...], msg: [...]`` shape so that tests matching on text keep matching.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kilorl.store.errors import (
    AuthError,
    ConfigError,
    ConnectionLost,
    InvalidRequest,
    KeyNotFound,
    ObjectLost,
    StoreError,
    StoreFullError,
    StoreTimeout,
    VersionGone,
    WorkerLeaving,
)


def _fmt(code: str, msg: str) -> str:
    return f"code: [{code}], msg: [{msg}]"


class DsRuntimeError(StoreError, RuntimeError):
    """Any runtime failure of an openYuanrong call (base of the RuntimeError family)."""


class DsTypeError(InvalidRequest, TypeError):
    """An argument has the wrong type (openYuanrong checks exact types)."""


class DsInvalidArgument(InvalidRequest, RuntimeError):
    """An argument has the right type but an invalid value (empty key, range, ...)."""


class DsKeyNotFound(KeyNotFound, RuntimeError):
    """None of the requested keys exists."""


class DsTimeout(StoreTimeout, RuntimeError):
    """A wait (latch, receive, sub-timeout) ran out."""


class DsConnectionError(ConnectionLost, RuntimeError):
    """The worker could not be reached or the connection broke."""


class DsNotReady(DsRuntimeError):
    """The client was used before ``init()``."""


class DsFullError(StoreFullError, RuntimeError):
    """The worker had no room for the object."""


class DsAuthError(AuthError, RuntimeError):
    """The worker refused the token."""


class DsVersionGone(VersionGone, RuntimeError):
    """A versioned object was reclaimed."""


class DsObjectLost(ObjectLost, RuntimeError):
    """The object's only copy died with its worker."""


class DsUnsupported(InvalidRequest, RuntimeError):
    """The call is valid openYuanrong but this platform or mapping cannot serve it."""


class FutureTimeoutException(DsTimeout):
    """``Future.get`` ran past its timeout (openYuanrong's name)."""


# kiloRL class -> (openYuanrong-compatible class, openYuanrong status code name)
_MAP: list[tuple[type[StoreError], type[StoreError], str]] = [
    (KeyNotFound, DsKeyNotFound, "K_NOT_FOUND"),
    (VersionGone, DsVersionGone, "K_NOT_FOUND"),
    (ObjectLost, DsObjectLost, "K_NOT_FOUND"),
    (StoreTimeout, DsTimeout, "K_RPC_DEADLINE_EXCEEDED"),
    (ConnectionLost, DsConnectionError, "K_RPC_UNAVAILABLE"),
    (WorkerLeaving, DsConnectionError, "K_RPC_UNAVAILABLE"),
    (StoreFullError, DsFullError, "K_OUT_OF_MEMORY"),
    (AuthError, DsAuthError, "K_NOT_AUTHORIZED"),
    (ConfigError, DsInvalidArgument, "K_INVALID"),
    (InvalidRequest, DsInvalidArgument, "K_INVALID"),
]


def convert(exc: BaseException) -> BaseException:
    """The openYuanrong-compatible counterpart of a kiloRL (or socket) error."""
    if isinstance(exc, (RuntimeError, TypeError)):
        return exc
    if isinstance(exc, StoreError):
        for native, ours, code in _MAP:
            if isinstance(exc, native):
                return ours(_fmt(code, str(exc)))
        return DsRuntimeError(_fmt("K_RUNTIME_ERROR", str(exc)))
    if isinstance(exc, OSError):
        return DsConnectionError(_fmt("K_RPC_UNAVAILABLE", f"cannot reach the worker: {exc}"))
    return exc


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raises kiloRL and socket errors as their openYuanrong-compatible classes."""
    try:
        yield
    except (StoreError, OSError) as exc:
        new = convert(exc)
        if new is exc:
            raise
        raise new from exc


def not_found(keys: list[str]) -> DsKeyNotFound:
    """The error of a multi-key read where no key was found (openYuanrong's wording)."""
    return DsKeyNotFound(_fmt("K_NOT_FOUND", f"Key not found. Cannot get objects from worker: {keys[:8]}"))


def invalid(msg: str) -> DsInvalidArgument:
    return DsInvalidArgument(_fmt("K_INVALID", msg))
