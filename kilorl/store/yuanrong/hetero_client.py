"""``HeteroClient``: host<->device transfers (``mset_d2h`` / ``mget_h2d``) and device
objects (``dev_mset`` / ``dev_mget``), synchronous or as ``Future``s.

A key's blobs are one kiloRL object (see ``blob_codec``): ``mset_d2h`` keeps it in host
memory tiers, ``dev_mset`` in the worker's device tier when it has one. Reads copy into
the caller's blobs, starting at ``DeviceBlobList.src_offset`` bytes into the object.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from typing import Any

from kilorl.store.errors import StoreError
from kilorl.store.yuanrong import blob_codec
from kilorl.store.yuanrong._base import Connected, check_keys
from kilorl.store.yuanrong._compat import exists_many
from kilorl.store.yuanrong.errors import (
    DsRuntimeError,
    FutureTimeoutException,
    invalid,
    translated,
)
from kilorl.store.yuanrong.kv_client import ExistenceOpt, SetParam
from kilorl.store.yuanrong.object_client import native_mode
from kilorl.store.yuanrong.util import Validator


class Blob:
    """One buffer: ``Blob(dev_ptr, size)`` (CUDA pointers), or ``Blob(tensor[, nbytes])``."""

    def __init__(self, dev_ptr: Any, size: int | None = None):
        blob_codec.check_pointer(dev_ptr, size)
        self.dev_ptr, self.size = dev_ptr, size

    def set_dev_ptr(self, dev_ptr: Any) -> None:
        blob_codec.check_pointer(dev_ptr, self.size)
        self.dev_ptr = dev_ptr

    def set_size(self, size: int) -> None:
        blob_codec.check_pointer(self.dev_ptr, size)
        self.size = size

    def view(self) -> Any:
        """The blob's bytes as a flat uint8 tensor over the caller's memory."""
        return blob_codec.blob_bytes(self.dev_ptr, self.size)


class DeviceBlobList:
    """The blobs of one key on device ``dev_idx``; reads start ``src_offset`` bytes in."""

    def __init__(self, dev_idx: int, blob_list: list[Blob], src_offset: int = 0):
        Validator.check_args_types([["dev_idx", dev_idx, int], ["blob_list", blob_list, list],
                                    ["src_offset", src_offset, int]])
        self.dev_idx, self.blob_list, self.src_offset = dev_idx, blob_list, src_offset

    def append_blob(self, blob: Blob) -> None:
        self.blob_list.append(blob)

    def set_dev_idx(self, dev_idx: int) -> None:
        self.dev_idx = dev_idx

    def set_src_offset(self, src_offset: int) -> None:
        self.src_offset = src_offset

    def get_blob_list(self) -> list[Blob]:
        return self.blob_list

    def views(self) -> list[Any]:
        for b in self.blob_list:
            if not isinstance(b, Blob):
                raise invalid(f"blob_list: items must be Blob, got {type(b).__name__}")
        return [b.view() for b in self.blob_list]


class MetaInfo:
    """Sizes of the blobs stored under one key."""

    def __init__(self, blob_size_list: list[int]) -> None:
        self.blob_size_list = blob_size_list


class Future:
    """Result of an async call: ``get(timeout_ms)`` returns the failed keys."""

    def __init__(self, future: concurrent.futures.Future):
        self._future = future

    def get(self, timeout_ms: int = 60000) -> list[str]:
        try:
            result = self._future.result(timeout=timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            raise FutureTimeoutException(f"code: [K_FUTURE_TIMEOUT], msg: [not done within {timeout_ms} ms]") from None
        return list(result or [])


def _check_lists(keys: Any, blob_lists: Any) -> None:
    Validator.check_args_types([["keys", keys, list], ["data_blob_list", blob_lists, list]])
    if not keys or not blob_lists:
        raise invalid("The input of keys and data_blob_list should not be empty")
    check_keys("keys", keys)
    if len(keys) != len(blob_lists):
        raise invalid(f"data_blob_list: {len(blob_lists)} lists for {len(keys)} keys")
    for bl in blob_lists:
        if not isinstance(bl, DeviceBlobList):
            raise invalid(f"data_blob_list: items must be DeviceBlobList, got {type(bl).__name__}")


class HeteroClient(Connected):
    """openYuanrong's heterogeneous-object client."""

    def __init__(self, host: str, port: int, connect_timeout_ms: int = 60000, token: str = "",
                 client_public_key: str = "", client_private_key: str = "", server_public_key: str = "",
                 access_key: str = "", secret_key: str = "", tenant_id: str = "",
                 enable_cross_node_connection: bool = False, req_timeout_ms: int = 0,
                 enable_exclusive_connection: bool = False, enable_remote_h2d: bool = False):
        Validator.check_args_types([
            ["client_public_key", client_public_key, str], ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str], ["access_key", access_key, str],
            ["secret_key", secret_key, str], ["tenant_id", tenant_id, str],
            ["enable_cross_node_connection", enable_cross_node_connection, bool],
            ["enable_exclusive_connection", enable_exclusive_connection, bool],
            ["enable_remote_h2d", enable_remote_h2d, bool]])
        super().__init__(host, port, connect_timeout_ms, token)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _submit(self, fn, *args: Any) -> Future:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="yr-hetero")
        return Future(self._pool.submit(fn, *args))

    def _device_tier(self) -> str | None:
        with translated():
            return "device" if "device" in self.store.stats().get("tiers", {}) else None

    # -- writes --------------------------------------------------------------------------
    def _put(self, keys: list[str], blob_lists: list[DeviceBlobList], tier: str | None, param: SetParam) -> list[str]:
        mode = native_mode(param.write_mode)
        Validator.check_args_types([["ttl_second", param.ttl_second, int], ["existence", param.existence, ExistenceOpt]])
        Validator.check_uint32("ttl_second", param.ttl_second)
        nx = param.existence is ExistenceOpt.NX  # the worker's set-if-absent: exact under races
        failed = []
        for key, bl in zip(keys, blob_lists):
            value = blob_codec.pack(bl.views())
            with translated():
                if not self.store.set(key, value, write_mode=mode, ttl=param.ttl_second or None, tier=tier,
                                      if_absent=nx):
                    failed.append(key)
        return failed

    def mset_d2h(self, keys: list[str], data_blob_list: list[DeviceBlobList], set_param: SetParam | None = None) -> None:
        """Copies each key's device blobs into one host object."""
        _check_lists(keys, data_blob_list)
        failed = self._put(keys, data_blob_list, None, set_param or SetParam())
        if failed:
            raise DsRuntimeError(f"code: [K_OC_KEY_ALREADY_EXIST], msg: [keys already exist: {failed[:8]}]")

    def async_mset_d2h(self, keys: list[str], data_blob_list: list[DeviceBlobList],
                       set_param: SetParam | None = None) -> Future:
        _check_lists(keys, data_blob_list)
        return self._submit(lambda: self.mset_d2h(keys, data_blob_list, set_param) or [])

    def dev_mset(self, keys: list[str], data_blob_list: list[DeviceBlobList]) -> list[str]:
        """Stores each key's blobs in the worker's device tier (host tiers if it has none)."""
        _check_lists(keys, data_blob_list)
        failed = []
        tier = self._device_tier()
        for key, bl in zip(keys, data_blob_list):
            try:
                self._put([key], [bl], tier, SetParam())
            except StoreError:
                failed.append(key)
        return failed

    def dev_publish(self, keys: list[str], data_blob_list: list[DeviceBlobList]) -> list[Future]:
        """Asynchronous ``dev_mset``, one future per key."""
        _check_lists(keys, data_blob_list)
        return [self._submit(self.dev_mset, [k], [bl]) for k, bl in zip(keys, data_blob_list)]

    # -- reads ---------------------------------------------------------------------------
    def _get_into(self, keys: list[str], blob_lists: list[DeviceBlobList], sub_timeout_ms: int) -> list[str]:
        Validator.check_args_types([["sub_timeout_ms", sub_timeout_ms, int]])
        Validator.check_param_range("sub_timeout_ms", sub_timeout_ms, 0, Validator.INT32_MAX_SIZE)
        values = self._fetch(keys, sub_timeout_ms)
        failed = []
        for key, bl, value in zip(keys, blob_lists, values):
            try:
                if value is None:
                    raise invalid(f"key {key!r} not found")
                blob_codec.unpack_into(value, bl.views(), bl.src_offset)
            except (StoreError, RuntimeError):
                failed.append(key)
        if len(failed) == len(keys):
            raise DsRuntimeError(f"code: [K_NOT_FOUND], msg: [Key not found or blob sizes do not match for "
                                 f"every key: {failed[:8]}]")
        return failed

    def mget_h2d(self, keys: list[str], data_blob_list: list[DeviceBlobList], sub_timeout_ms: int) -> list[str]:
        """Copies host objects into the caller's device blobs; returns the failed keys."""
        _check_lists(keys, data_blob_list)
        return self._get_into(keys, data_blob_list, sub_timeout_ms)

    def async_mget_h2d(self, keys: list[str], data_blob_list: list[DeviceBlobList], sub_timeout_ms: int) -> Future:
        _check_lists(keys, data_blob_list)
        return self._submit(self._get_into, keys, data_blob_list, sub_timeout_ms)

    def dev_mget(self, keys: list[str], data_blob_list: list[DeviceBlobList], sub_timeout_ms: int) -> list[str]:
        """Copies device objects into the caller's blobs; returns the failed keys."""
        _check_lists(keys, data_blob_list)
        return self._get_into(keys, data_blob_list, sub_timeout_ms)

    def dev_subscribe(self, keys: list[str], data_blob_list: list[DeviceBlobList]) -> list[Future]:
        """Waits (up to 60 s) for each published key, copies it in, then deletes it (one-shot)."""
        _check_lists(keys, data_blob_list)

        def one(key: str, bl: DeviceBlobList) -> list[str]:
            failed = self._get_into([key], [bl], 60000)
            with translated():
                self.store.delete(key)
            return failed
        return [self._submit(one, k, bl) for k, bl in zip(keys, data_blob_list)]

    def get_meta_info(self, keys: list[str], is_dev_key: bool) -> tuple[list[str], list[MetaInfo]]:
        """(failed keys, blob sizes of the others)."""
        check_keys("keys", keys)
        Validator.check_args_types([["is_dev_key", is_dev_key, bool]])
        failed, infos = [], []
        for key, value in zip(keys, self._fetch(keys, 0)):
            try:
                if value is None:
                    raise invalid(f"key {key!r} not found")
                infos.append(MetaInfo(blob_codec.sizes_of(value)))
            except RuntimeError:
                failed.append(key)
        return failed, infos

    # -- keys ----------------------------------------------------------------------------
    def delete(self, keys: list[str] | None = None) -> list[str]:
        """Deletes keys; returns the keys that failed (a missing key is not a failure)."""
        if keys is None:
            raise invalid("The input of keys list should not be empty")
        check_keys("keys", keys, allow_empty=True)
        if keys:
            with translated():
                self.store.delete(*keys)
        return []

    dev_delete = delete
    dev_local_delete = delete

    def async_dev_delete(self, keys: list[str] | None = None) -> Future:
        if keys is None:
            raise invalid("The input of keys list should not be empty")
        return self._submit(self.delete, keys)

    def generate_key(self, prefix: str = "") -> str:
        Validator.check_args_types([["prefix", prefix, str]])
        self.store  # noqa: B018 - raises if not initialised
        return f"{prefix}{uuid.uuid4()}"

    def exist(self, keys: list[str]) -> list[bool]:
        check_keys("keys", keys)
        return exists_many(self.store, keys)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        super().close()


__all__ = ["Blob", "DeviceBlobList", "Future", "HeteroClient", "MetaInfo", "SetParam"]
