"""openYuanrong datasystem's Python SDK on kiloRL's store.

``from yr.datasystem.X import Y`` becomes ``from kilorl.store.yuanrong.X import Y``; the
names, constructors and signatures are openYuanrong's, the mechanisms kiloRL's (objects,
zero-copy arena views, streams, the device tier). Errors are ``RuntimeError`` /
``TypeError`` instances that are also kiloRL store errors. What differs and why is in
docs/store.md, "Porting from openYuanrong".
"""

from __future__ import annotations

from typing import Any

from kilorl.store.yuanrong.ds_client import DsClient
from kilorl.store.yuanrong.errors import FutureTimeoutException
from kilorl.store.yuanrong.hetero_client import Blob, DeviceBlobList, Future, HeteroClient, MetaInfo
from kilorl.store.yuanrong.kv_client import ExistenceOpt, KVClient, ReadParam, SetParam
from kilorl.store.yuanrong.object_client import Buffer, CacheType, ConsistencyType, ObjectClient, WriteMode
from kilorl.store.yuanrong.stream_client import StreamClient, SubconfigType
from kilorl.store.yuanrong.util import Context, Status

__all__ = ["Buffer", "CacheType", "ConsistencyType", "DsClient", "HeteroClient", "ObjectClient", "KVClient",
           "Status", "StreamClient", "SubconfigType", "WriteMode", "Context", "FutureTimeoutException", "Blob",
           "DeviceBlobList", "DsTensorClient", "CopyRange", "MetaInfo", "Future", "ExistenceOpt", "ReadParam",
           "SetParam"]


def __getattr__(name: str) -> Any:
    # As in openYuanrong, the tensor client (which needs torch) is imported on first use.
    if name in ("DsTensorClient", "CopyRange"):
        from kilorl.store.yuanrong import ds_tensor_client

        return getattr(ds_tensor_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
