"""Cluster metadata stores: the built-in in-process one, or a real etcd.

``open_metastore("builtin")`` or ``open_metastore("etcd://127.0.0.1:2379")``.
"""

from __future__ import annotations

from kilorl.store.metastore.base import (
    CasResult,
    CompactedError,
    KeyValue,
    Lease,
    LeaseNotFound,
    Metastore,
    MetastoreClosed,
    MetastoreError,
    MetastoreUnavailable,
    RangeResult,
    Watch,
    WatchClosed,
    WatchEvent,
)
from kilorl.store.metastore.keepalive import LeaseKeeper


def open_metastore(url: str, **options) -> Metastore:
    """A metastore from a URL: ``builtin`` (in this process) or ``etcd://HOST:PORT``."""
    if not isinstance(url, str):
        raise TypeError(f"metastore url must be a string, got {type(url).__name__}")
    if url == "builtin":
        from kilorl.store.metastore.builtin import BuiltinMetastore

        return BuiltinMetastore(**options)
    if url.startswith("etcd://"):
        from kilorl.store.metastore.etcd import EtcdMetastore

        return EtcdMetastore(url, **options)
    raise ValueError(f"metastore url {url!r} is not supported: use 'builtin' or 'etcd://HOST:PORT'")


__all__ = [
    "CasResult",
    "CompactedError",
    "KeyValue",
    "Lease",
    "LeaseKeeper",
    "LeaseNotFound",
    "Metastore",
    "MetastoreClosed",
    "MetastoreError",
    "MetastoreUnavailable",
    "RangeResult",
    "Watch",
    "WatchClosed",
    "WatchEvent",
    "open_metastore",
]
