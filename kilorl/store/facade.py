"""openYuanrong-style facade: ``DsClient(host, port).init()``, ``.kv()``, ``.hetero()``.

A thin layer over ``StoreClient`` so code written against openYuanrong datasystem's
Python SDK runs against a kiloRL worker. What maps and what does not is in docs/store.md:
device blobs are torch tensors here (``Blob(tensor)``), not raw device pointers, and a
``DeviceBlobList`` is stored as one device-tier object per key.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kilorl.store.client import StoreClient
from kilorl.store.client import WriteMode as _NativeMode
from kilorl.store.errors import InvalidRequest, KeyNotFound, StoreError


class WriteMode(enum.Enum):
    """openYuanrong's write-mode names, mapped onto the native modes."""

    NONE_L2_CACHE = "none"
    WRITE_THROUGH_L2_CACHE = "through"
    WRITE_BACK_L2_CACHE = "back"
    NONE_L2_CACHE_EVICT = "none"  # eviction is the worker's policy here; same as NONE_L2_CACHE


@dataclass
class Blob:
    """One device buffer. openYuanrong takes a raw ``dev_ptr``; here it is a torch tensor."""

    tensor: Any

    def __post_init__(self) -> None:
        if not (type(self.tensor).__module__.startswith("torch") and hasattr(self.tensor, "device")):
            raise InvalidRequest("Blob: needs a torch tensor (raw device pointers are not supported)")


@dataclass
class DeviceBlobList:
    dev_idx: int
    blob_list: list[Blob]


class KVClient:
    """``set/get/delete/exist/mset`` with openYuanrong's signatures."""

    def __init__(self, client: StoreClient):
        self._c = client

    def set(self, key: str, val: bytes | bytearray | memoryview | str, write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
            ttl_second: int = 0) -> None:
        self._c.set(key, val, write_mode=_NativeMode(write_mode.value), ttl=ttl_second or None)

    def mset(self, keys: Sequence[str], vals: Sequence[Any], write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
             ttl_second: int = 0) -> None:
        if len(keys) != len(vals):
            raise InvalidRequest(f"vals: {len(vals)} values for {len(keys)} keys")
        for k, v in zip(keys, vals):
            self.set(k, v, write_mode, ttl_second)

    def get(self, keys: Sequence[str], convert_to_str: bool = False, sub_timeout_ms: int = 0) -> list[Any]:
        """Values in key order (bytes, or str with ``convert_to_str``); a missing key raises KeyNotFound."""
        if sub_timeout_ms:
            values = [self._c.get(k, timeout=sub_timeout_ms / 1000) for k in keys]
        else:
            values = self._c.mget(list(keys))
        missing = [k for k, v in zip(keys, values) if v is None]
        if missing:
            raise KeyNotFound(f"keys not found: {missing}")
        out = [bytes(v) if isinstance(v, memoryview) else v for v in values]
        return [v.decode() if convert_to_str and isinstance(v, bytes) else v for v in out]

    def delete(self, keys: Sequence[str]) -> list[str]:
        """Deletes keys; returns the keys that did not exist (openYuanrong returns failed keys)."""
        found = [self._c.exists(k) for k in keys]
        self._c.delete(*keys)
        return [k for k, f in zip(keys, found) if not f]

    def exist(self, keys: Sequence[str]) -> list[bool]:
        return [self._c.exists(k) for k in keys]

    def generate_key(self, prefix: str = "") -> str:
        return f"{prefix}{uuid.uuid4().hex}"


class HeteroClient:
    """Device-object API: ``dev_mset / dev_mget / dev_delete`` over device-tier objects."""

    def __init__(self, client: StoreClient):
        self._c = client
        self._tier = "device" if "device" in client.stats()["tiers"] else None

    def dev_mset(self, keys: Sequence[str], blob_lists: Sequence[DeviceBlobList]) -> list[str]:
        """Stores each key's blobs as one object; returns the keys that failed."""
        if len(keys) != len(blob_lists):
            raise InvalidRequest(f"blob_lists: {len(blob_lists)} lists for {len(keys)} keys")
        failed = []
        for key, bl in zip(keys, blob_lists):
            value = {str(i): b.tensor for i, b in enumerate(bl.blob_list)}
            try:
                self._c.set(key, value, tier=self._tier)
            except StoreError:
                failed.append(key)
        return failed

    def dev_mget(self, keys: Sequence[str], blob_lists: Sequence[DeviceBlobList], sub_timeout_ms: int = 0) -> list[str]:
        """Copies each stored blob into the caller's tensors (in place); returns failed keys."""
        failed = []
        for key, bl in zip(keys, blob_lists):
            try:
                stored = self._c.get(key, timeout=sub_timeout_ms / 1000 if sub_timeout_ms else None)
            except StoreError:
                failed.append(key)
                continue
            if len(stored) != len(bl.blob_list):
                failed.append(key)
                continue
            for i, blob in enumerate(bl.blob_list):
                src = stored[str(i)]
                if src.shape != blob.tensor.shape or src.dtype != blob.tensor.dtype:
                    failed.append(key)
                    break
                blob.tensor.copy_(src)
        return failed

    def dev_delete(self, keys: Sequence[str]) -> list[str]:
        found = [self._c.exists(k) for k in keys]
        self._c.delete(*keys)
        return [k for k, f in zip(keys, found) if not f]


class DsClient:
    """Entry point mirroring openYuanrong's ``DsClient(host, port, ..., token=...)``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 31501, connect_timeout_ms: int = 9000, token: str = "",
                 **_unsupported: Any):
        self._host, self._port = host, port
        self._timeout = connect_timeout_ms / 1000
        self._token = token or None
        self._client: StoreClient | None = None

    def init(self) -> DsClient:
        self._client = StoreClient(f"{self._host}:{self._port}", token=self._token, connect_timeout=self._timeout)
        return self

    def _native(self) -> StoreClient:
        if self._client is None:
            raise StoreError("DsClient: call init() first")
        return self._client

    def kv(self) -> KVClient:
        return KVClient(self._native())

    def hetero(self) -> HeteroClient:
        return HeteroClient(self._native())

    def native(self) -> StoreClient:
        """The underlying kiloRL client (versions, streams, zero-copy gets)."""
        return self._native()

    def shutdown(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
