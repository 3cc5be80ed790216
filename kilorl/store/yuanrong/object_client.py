"""``ObjectClient`` and ``Buffer``: create / write / seal-or-publish objects, latches, refs.

Mapping: ``create(key, size)`` gives a ``Buffer`` over client memory; ``publish()`` /
``seal()`` store its bytes as one ordinary kiloRL object (``publish`` may be repeated,
``seal`` is final). ``get`` returns buffers over zero-copy views of the worker's arena.
Global reference counts and nesting are records in the store (see ``_refs``); latches are
per process (see ``_latch``). ``invalidate_buffer`` deletes the object.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

import numpy as np

from kilorl.store.client import WriteMode as NativeWriteMode
from kilorl.store.yuanrong._base import Connected, check_keys
from kilorl.store.yuanrong._compat import as_bytes_view
from kilorl.store.yuanrong._latch import latch_for
from kilorl.store.yuanrong._refs import RefTable
from kilorl.store.yuanrong.errors import DsRuntimeError, DsTypeError, invalid, not_found, translated
from kilorl.store.yuanrong.util import Validator


class WriteMode(enum.Enum):
    """openYuanrong's write modes; ``*_EVICT`` only hint that the object may be evicted,
    which kiloRL's tiers do under pressure anyway."""

    NONE_L2_CACHE = 0
    WRITE_THROUGH_L2_CACHE = 1
    WRITE_BACK_L2_CACHE = 2
    NONE_L2_CACHE_EVICT = 3
    WRITE_BACK_L2_CACHE_EVICT = 4


NATIVE_MODE = {
    WriteMode.NONE_L2_CACHE: NativeWriteMode.NONE_L2,
    WriteMode.WRITE_THROUGH_L2_CACHE: NativeWriteMode.WRITE_THROUGH_L2,
    WriteMode.WRITE_BACK_L2_CACHE: NativeWriteMode.WRITE_BACK_L2,
    WriteMode.NONE_L2_CACHE_EVICT: NativeWriteMode.NONE_L2,
    WriteMode.WRITE_BACK_L2_CACHE_EVICT: NativeWriteMode.WRITE_BACK_L2,
}


def native_mode(mode: WriteMode) -> NativeWriteMode:
    Validator.check_args_types([["write_mode", mode, WriteMode]])
    return NATIVE_MODE[mode]


class ConsistencyType(enum.Enum):
    """Accepted for compatibility; one kiloRL worker serves a key from one place."""

    PRAM = 0
    CAUSAL = 1


class CacheType(enum.Enum):
    """Where openYuanrong keeps a value (``MEMEORY`` is openYuanrong's spelling)."""

    MEMEORY = 0
    DISK = 1
    MEMORY = 0  # alias with the usual spelling


class Buffer:
    """A created (writable) or fetched (read-only) object's bytes, with latches."""

    def __init__(self) -> None:
        self._data: np.ndarray | None = None
        self._client: ObjectClient | None = None
        self._key = ""
        self._sealed = False

    @classmethod
    def _make(cls, client: ObjectClient, key: str, data: np.ndarray, sealed: bool) -> Buffer:
        buf = cls()
        buf._client, buf._key, buf._data, buf._sealed = client, key, data, sealed
        return buf

    def _check_buffer(self) -> np.ndarray:
        if self._data is None or self._client is None:
            raise DsRuntimeError("The buffer is None, please create it first.")
        return self._data

    def _latch(self):
        self._check_buffer()
        return latch_for(self._client.store.address, self._key)

    @staticmethod
    def _timeout(timeout_sec: int) -> int:
        Validator.check_args_types([["timeout_sec", timeout_sec, int]])
        Validator.check_param_range("timeout_sec", timeout_sec, 1, Validator.INT32_MAX_SIZE)
        return timeout_sec

    def wlatch(self, timeout_sec: int = 60) -> None:
        self._latch().wlatch(self._timeout(timeout_sec))

    def unwlatch(self) -> None:
        self._latch().unwlatch()

    def rlatch(self, timeout_sec: int = 60) -> None:
        self._latch().rlatch(self._timeout(timeout_sec))

    def unrlatch(self) -> None:
        self._latch().unrlatch()

    def mutable_data(self) -> memoryview:
        data = self._check_buffer()
        if not data.flags.writeable:  # a fetched object: writes go to a private copy
            self._data = data = data.copy()
        return memoryview(data)

    def immutable_data(self) -> memoryview:
        view = self._check_buffer().view()
        view.flags.writeable = False
        return memoryview(view)

    def memory_copy(self, value: bytes | bytearray | memoryview) -> None:
        Validator.check_args_types([["value", value, memoryview, bytes, bytearray]])
        src = np.frombuffer(memoryview(value).cast("B"), dtype=np.uint8)
        data = self._check_buffer()
        if self._sealed:
            raise DsRuntimeError(f"code: [K_OC_ALREADY_SEALED], msg: [object {self._key!r} is sealed]")
        if src.nbytes > data.nbytes:
            raise invalid(f"memory_copy: {src.nbytes} bytes do not fit the buffer of {data.nbytes} bytes")
        data[:src.nbytes] = src

    def _store(self, nested_object_keys: list[str] | None, seal: bool) -> None:
        nested = [] if nested_object_keys is None else nested_object_keys
        Validator.check_args_types([["nested_object_keys", nested, list]])
        if not all(type(k) is str for k in nested):
            raise DsTypeError("The input of nested_object_keys should be a list of strings. There exists error type.")
        data = self._check_buffer()
        if self._sealed:
            raise DsRuntimeError(f"code: [K_OC_ALREADY_SEALED], msg: [object {self._key!r} is already sealed]")
        with translated():
            self._client.store.set(self._key, memoryview(data))
        self._client.refs().nest(self._key, nested)
        self._sealed = seal

    def publish(self, nested_object_keys: list[str] | None = None) -> None:
        """Makes the current bytes visible; may be called again after further writes."""
        self._store(nested_object_keys, seal=False)

    def seal(self, nested_object_keys: list[str] | None = None) -> None:
        """Makes the bytes visible and immutable."""
        self._store(nested_object_keys, seal=True)

    def invalidate_buffer(self) -> None:
        """Drops the object from the worker (later gets miss)."""
        self._check_buffer()
        with translated():
            self._client.store.delete(self._key)

    def get_size(self) -> int:
        return int(self._check_buffer().nbytes)


class ObjectClient(Connected):
    """openYuanrong's object-cache client on a kiloRL worker."""

    def __init__(self, host: str, port: int, connect_timeout_ms: int = 60000, token: str = "",
                 client_public_key: str = "", client_private_key: str = "", server_public_key: str = "",
                 access_key: str = "", secret_key: str = "", tenant_id: str = "", req_timeout_ms: int = 0,
                 enable_exclusive_connection: bool = False):
        Validator.check_args_types([
            ["client_public_key", client_public_key, str], ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str], ["access_key", access_key, str],
            ["secret_key", secret_key, str], ["tenant_id", tenant_id, str],
            ["enable_exclusive_connection", enable_exclusive_connection, bool]])
        super().__init__(host, port, connect_timeout_ms, token)
        self._refs: RefTable | None = None

    def refs(self) -> RefTable:
        if self._refs is None or self._refs.store is not self.store:
            self._refs = RefTable(self.store)
        return self._refs

    @staticmethod
    def _consistency(param: dict[str, Any] | None) -> ConsistencyType:
        param = {"consistency_type": ConsistencyType.PRAM} if param is None else param
        (ctype,) = Validator.check_key_exists(param, ["consistency_type"])
        Validator.check_args_types([["consistency_type", ctype, ConsistencyType]])
        return ctype

    def create(self, object_key: str, size: int, param: dict[str, Any] | None = None) -> Buffer:
        self._consistency(param)
        Validator.check_args_types([["object_key", object_key, str], ["size", size, int]])
        check_keys("object_key", [object_key])
        if size <= 0:
            raise invalid("The dataSize value should be bigger than zero.")
        self.store  # noqa: B018 - raises if not initialised
        return Buffer._make(self, object_key, np.zeros(size, dtype=np.uint8), sealed=False)

    def put(self, object_key: str, value: bytes | bytearray | memoryview, param: dict[str, Any] | None = None,
            nested_object_keys: list[str] | None = None) -> None:
        self._consistency(param)
        nested = [] if nested_object_keys is None else nested_object_keys
        Validator.check_args_types([["object_key", object_key, str], ["value", value, memoryview, bytes, bytearray],
                                    ["nested_object_keys", nested, list]])
        check_keys("object_key", [object_key])
        if memoryview(value).nbytes == 0:
            raise invalid("The dataSize value should be bigger than zero.")
        with translated():
            self.store.set(object_key, value)
        self.refs().nest(object_key, nested)

    def get(self, object_keys: list[str], timeout_ms: int) -> list[Buffer | None]:
        """Buffers in key order, ``None`` for misses; if every key misses, ``RuntimeError``."""
        Validator.check_args_types([["object_keys", object_keys, list], ["timeout_ms", timeout_ms, int]])
        Validator.check_param_range("timeout_ms", timeout_ms, 0, Validator.INT32_MAX_SIZE)
        check_keys("object_keys", object_keys)
        values = self._fetch(object_keys, timeout_ms)
        if all(v is None for v in values):
            raise not_found(object_keys)
        out: list[Buffer | None] = []
        for key, value in zip(object_keys, values):
            if value is None:
                out.append(None)
                continue
            arr = np.frombuffer(as_bytes_view(value), dtype=np.uint8)
            out.append(Buffer._make(self, key, arr, sealed=True))
        return out

    def g_increase_ref(self, object_keys: list[str]) -> list[str]:
        """Adds one global reference per key; returns the keys that failed (none here)."""
        check_keys("object_keys", object_keys)
        refs = self.refs()
        for key in object_keys:
            refs.add(key, 1)
        return []

    def g_decrease_ref(self, object_keys: list[str]) -> list[str]:
        """Drops one reference per key; an object whose count reaches zero is deleted."""
        check_keys("object_keys", object_keys)
        refs = self.refs()
        for key in object_keys:
            refs.add(key, -1)
        return []

    def query_global_ref_num(self, object_key: str) -> int:
        Validator.check_args_types([["object_key", object_key, str]])
        return self.refs().count(object_key)

    def generate_object_id(self, prefix: str = "") -> str:
        Validator.check_args_types([["prefix", prefix, str]])
        self.store  # noqa: B018 - raises if not initialised
        return f"{prefix}{uuid.uuid4()}"
