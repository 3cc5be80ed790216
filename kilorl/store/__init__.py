"""kiloRL's data system: a tiered object store (device / shared-memory DRAM / disk + L2).

``from kilorl.store import StoreClient, WriteMode``. This package never imports the RL
side of kiloRL, and imports torch only when a tensor or the device tier is used.
"""

from __future__ import annotations

from typing import Any

from kilorl.store.errors import (
    AuthError,
    ConfigError,
    ConnectionLost,
    InvalidRequest,
    KeyNotFound,
    ObjectLost,
    ProtocolError,
    Reconnected,
    StoreError,
    StoreFullError,
    StoreTimeout,
    VersionGone,
    WorkerLeaving,
    WorkerUnreachable,
)

_LAZY = {
    "StoreClient": ("kilorl.store.client", "StoreClient"),
    "WriteMode": ("kilorl.store.client", "WriteMode"),
    "WorkerConfig": ("kilorl.store.local.config", "WorkerConfig"),
    "DsClient": ("kilorl.store.facade", "DsClient"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kilorl.store' has no attribute {name!r}")


__all__ = ["StoreClient", "WriteMode", "WorkerConfig", "DsClient", "StoreError", "KeyNotFound", "StoreFullError",
           "InvalidRequest", "AuthError", "ConnectionLost", "ProtocolError", "StoreTimeout", "VersionGone",
           "ConfigError", "ObjectLost", "WorkerLeaving", "WorkerUnreachable", "Reconnected"]
