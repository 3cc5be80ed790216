"""Deprecated name of ``kilorl.store.yuanrong`` (kept so that old imports keep working).

``from kilorl.store.facade import DsClient`` still works; new code imports
``kilorl.store.yuanrong`` (the module tree that mirrors openYuanrong's SDK).
"""

from __future__ import annotations

from kilorl.store.yuanrong import (  # noqa: F401 - re-exported names
    Blob,
    Buffer,
    ConsistencyType,
    DeviceBlobList,
    DsClient,
    ExistenceOpt,
    Future,
    HeteroClient,
    KVClient,
    ObjectClient,
    ReadParam,
    StreamClient,
    SubconfigType,
    WriteMode,
)
