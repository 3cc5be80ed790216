"""``KVClient``: openYuanrong's state-cache API on kiloRL objects.

Values are bytes: a ``str`` is stored as its UTF-8 bytes and comes back as ``bytes``
(``convert_to_str=True`` decodes). A multi-key read returns ``None`` in place of a miss
and raises ``RuntimeError`` only if every key misses. Zero-copy reads
(``get_read_only_buffers``, ``get_buffers``) are views of the worker's arena.
"""

from __future__ import annotations

import enum
import uuid
from collections import namedtuple
from typing import Any

import numpy as np

from kilorl.store.errors import KeyNotFound, StoreError
from kilorl.store.yuanrong._base import Connected, check_keys
from kilorl.store.yuanrong._compat import as_bytes_view, exists_many, read_range
from kilorl.store.yuanrong._latch import latch_for
from kilorl.store.yuanrong._owned import owned_bytes
from kilorl.store.yuanrong.errors import DsRuntimeError, convert, invalid, not_found, translated
from kilorl.store.yuanrong.object_client import NATIVE_MODE, CacheType, WriteMode, native_mode
from kilorl.store.yuanrong.util import Validator

DEFAULT_FAST_TRANSPORT_MEM_SIZE = 256 * 1024 * 1024
MAX_FAST_TRANSPORT_MEM_SIZE = 2 * 1024 * 1024 * 1024
MAX_KEYS = 100000

_VALUE_TYPES = (bytes, bytearray, memoryview, str)

ReadParam = namedtuple("ReadParam", ["key", "offset", "size"])
"""A byte range of one value: ``key``, ``offset`` and ``size`` in bytes."""


class ExistenceOpt(enum.Enum):
    """``NX``: set only keys that do not exist yet."""

    NONE = 0
    NX = 1


class SetParam:
    """Options of a set (used by the hetero client's ``mset_d2h``)."""

    def __init__(self) -> None:
        self.write_mode = WriteMode.NONE_L2_CACHE
        self.ttl_second = 0
        self.existence = ExistenceOpt.NONE
        self.cache_type = CacheType.MEMEORY


class StateValueBuffer(np.ndarray):
    """A value's bytes as a uint8 array (buffer protocol), with openYuanrong's C++-style
    accessors. ``mcreate`` gives writable ones, ``get_buffers`` read-only arena views."""

    key: str
    ttl_second: int
    write_mode: WriteMode

    @classmethod
    def wrap(cls, data: np.ndarray, key: str, write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
             ttl_second: int = 0) -> StateValueBuffer:
        buf = data.view(cls)
        buf.key, buf.write_mode, buf.ttl_second = key, write_mode, ttl_second
        return buf

    def __array_finalize__(self, obj: Any) -> None:
        self.key = getattr(obj, "key", "")
        self.write_mode = getattr(obj, "write_mode", WriteMode.NONE_L2_CACHE)
        self.ttl_second = getattr(obj, "ttl_second", 0)

    def GetSize(self) -> int:  # noqa: N802 - openYuanrong's name
        return int(self.nbytes)

    def MutableData(self) -> memoryview:  # noqa: N802
        if not self.flags.writeable:
            raise DsRuntimeError(f"code: [K_INVALID], msg: [buffer of {self.key!r} is read-only]")
        return memoryview(self.view(np.ndarray))

    def ImmutableData(self) -> memoryview:  # noqa: N802
        view = self.view(np.ndarray)
        view.flags.writeable = False
        return memoryview(view)


class ReadOnlyBuffer:
    """A read-only view of a value (or of a range of it) with read latches."""

    def __init__(self, view: memoryview, address: str, key: str):
        self._view, self._address, self._key = view, address, key

    @staticmethod
    def _timeout(timeout_sec: int) -> int:
        Validator.check_args_types([["timeout_sec", timeout_sec, int]])
        Validator.check_param_range("timeout_sec", timeout_sec, 1, Validator.INT32_MAX_SIZE)
        return timeout_sec

    def immutable_data(self, with_latch: bool = False, timeout_sec: int = 60) -> memoryview:
        """The view; with ``with_latch`` it first waits (up to ``timeout_sec``) for writers."""
        if with_latch is False and type(timeout_sec) is int and 1 <= timeout_sec <= Validator.INT32_MAX_SIZE:
            return self._view  # hot path: nothing to check or wait for
        Validator.check_args_types([["with_latch", with_latch, bool]])
        timeout = self._timeout(timeout_sec)
        if with_latch:
            latch = latch_for(self._address, self._key)
            latch.rlatch(timeout)
            latch.unrlatch()
        return self._view

    def rlatch(self, timeout_sec: int = 60) -> None:
        latch_for(self._address, self._key).rlatch(self._timeout(timeout_sec))

    def unrlatch(self) -> None:
        latch_for(self._address, self._key).unrlatch()


def _as_value(val: Any) -> bytes | bytearray | memoryview:
    Validator.check_args_types([["val", val, memoryview, bytes, bytearray, str]])
    out = val.encode() if isinstance(val, str) else val
    if memoryview(out).nbytes == 0:
        raise invalid("The dataSize value should be bigger than zero.")
    return out


class KVClient(Connected):
    """openYuanrong's ``KVClient(host, port, ...)``; connects in ``init()``."""

    def __init__(self, host: str = "", port: int = 0, connect_timeout_ms: int = 60000, token: str = "",
                 client_public_key: str = "", client_private_key: str = "", server_public_key: str = "",
                 access_key: str = "", secret_key: str = "", tenant_id: str = "",
                 enable_cross_node_connection: bool = False, req_timeout_ms: int = 0,
                 enable_exclusive_connection: bool = False,
                 fast_transport_mem_size: int = DEFAULT_FAST_TRANSPORT_MEM_SIZE):
        Validator.check_args_types([
            ["client_public_key", client_public_key, str], ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str], ["access_key", access_key, str],
            ["secret_key", secret_key, str], ["tenant_id", tenant_id, str],
            ["enable_cross_node_connection", enable_cross_node_connection, bool],
            ["enable_exclusive_connection", enable_exclusive_connection, bool],
            ["fast_transport_mem_size", fast_transport_mem_size, int]])
        Validator.check_param_range("fast_transport_mem_size", fast_transport_mem_size, 1,
                                    MAX_FAST_TRANSPORT_MEM_SIZE)
        super().__init__(host, port, connect_timeout_ms, token)

    # -- writes --------------------------------------------------------------------------
    @staticmethod
    def _write_args(write_mode: WriteMode, ttl_second: int) -> tuple[Any, float | None]:
        mode = native_mode(write_mode)
        Validator.check_args_types([["ttl_second", ttl_second, int]])
        Validator.check_uint32("ttl_second", ttl_second)
        return mode, (ttl_second or None)

    def set(self, key: str, val: Any, write_mode: WriteMode = WriteMode.NONE_L2_CACHE, ttl_second: int = 0) -> None:
        store = self._store
        if (store is None or type(key) is not str or not key or type(val) not in _VALUE_TYPES
                or type(write_mode) is not WriteMode or type(ttl_second) is not int
                or not 0 <= ttl_second <= Validator.UINT32_MAX_SIZE):
            self._check_set(key, val, write_mode, ttl_second)  # raises the precise error
        if type(val) is str:
            val = val.encode()
        if (val.nbytes if type(val) is memoryview else len(val)) == 0:
            raise invalid("The dataSize value should be bigger than zero.")
        try:
            store.set(key, val, write_mode=NATIVE_MODE[write_mode], ttl=ttl_second or None)
        except (StoreError, OSError) as exc:
            raise convert(exc) from exc

    def _check_set(self, key: Any, val: Any, write_mode: Any, ttl_second: Any) -> None:
        Validator.check_args_types([["key", key, str]])
        _as_value(val)
        self._write_args(write_mode, ttl_second)
        check_keys("key", [key])
        self.store  # noqa: B018 - raises if not initialised

    def set_value(self, val: Any, write_mode: WriteMode = WriteMode.NONE_L2_CACHE, ttl_second: int = 0) -> str:
        """Stores ``val`` under a generated key and returns the key."""
        key = self.generate_key()
        self.set(key, val, write_mode, ttl_second)
        return key

    def _prepare_mset(self, keys: list[str], vals: list[Any], existence_opt: ExistenceOpt) -> list:
        Validator.check_args_types([["keys", keys, list], ["vals", vals, list],
                                    ["existence_opt", existence_opt, ExistenceOpt]])
        check_keys("keys", keys)
        if len(keys) != len(vals):
            raise invalid(f"vals: {len(vals)} values for {len(keys)} keys")
        return [_as_value(v) for v in vals]

    def mset(self, keys: list[str], vals: list[Any], write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
             ttl_second: int = 0, existence_opt: ExistenceOpt = ExistenceOpt.NONE) -> list[str]:
        """Sets every key; with ``NX`` keys that already exist are skipped and returned.

        NX is the worker's set-if-absent (``StoreClient.set(if_absent=True)``): of concurrent
        writers of one key exactly one stores, the others get the key back as failed.
        """
        values = self._prepare_mset(keys, vals, existence_opt)
        mode, ttl = self._write_args(write_mode, ttl_second)
        nx = existence_opt is ExistenceOpt.NX
        with translated():
            return [key for key, value in zip(keys, values)
                    if not self.store.set(key, value, write_mode=mode, ttl=ttl, if_absent=nx)]

    def msettx(self, keys: list[str], vals: list[Any], write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
               ttl_second: int = 0, existence_opt: ExistenceOpt = ExistenceOpt.NONE) -> None:
        """All or nothing: with ``NX``, if any key exists nothing is written (``RuntimeError``).

        Each key is set-if-absent in the worker; when one loses, the keys this call stored
        are deleted again, so no concurrent writer's value is ever overwritten (a reader may
        briefly see a key of a call that then rolls back).
        """
        values = self._prepare_mset(keys, vals, existence_opt)
        mode, ttl = self._write_args(write_mode, ttl_second)
        nx = existence_opt is ExistenceOpt.NX
        stored: list[str] = []
        with translated():
            for key, value in zip(keys, values):
                if self.store.set(key, value, write_mode=mode, ttl=ttl, if_absent=nx):
                    stored.append(key)
                    continue
                if stored:
                    self.store.delete(*stored)
                raise DsRuntimeError(f"code: [K_OC_KEY_ALREADY_EXIST], msg: [keys already exist: [{key!r}]]")

    def mcreate(self, keys: list[str], sizes: list[int], write_mode: WriteMode = WriteMode.NONE_L2_CACHE,
                ttl_second: int = 0) -> list[StateValueBuffer]:
        """Writable buffers to fill in place; ``mset_buffer`` stores them."""
        Validator.check_args_types([["keys", keys, list], ["sizes", sizes, list]])
        check_keys("keys", keys)
        native_mode(write_mode)
        self._write_args(write_mode, ttl_second)
        if len(keys) != len(sizes):
            raise invalid(f"sizes: {len(sizes)} sizes for {len(keys)} keys")
        for size in sizes:
            if type(size) is not int or size <= 0:
                raise invalid(f"The dataSize value should be bigger than zero (got {size!r}).")
        self.store  # noqa: B018 - raises if not initialised
        return [StateValueBuffer.wrap(np.zeros(s, dtype=np.uint8), k, write_mode, ttl_second)
                for k, s in zip(keys, sizes)]

    def mset_buffer(self, buffers: list[StateValueBuffer]) -> None:
        Validator.check_args_types([["buffers", buffers, list]])
        for buf in buffers:
            if not isinstance(buf, StateValueBuffer):
                raise invalid(f"buffers: items must come from mcreate, got {type(buf).__name__}")
        with translated():
            for buf in buffers:
                mode, ttl = self._write_args(buf.write_mode, buf.ttl_second)
                self.store.set(buf.key, memoryview(buf.view(np.ndarray)), write_mode=mode, ttl=ttl)

    # -- reads ---------------------------------------------------------------------------
    def _read_all(self, keys: list[str], timeout_ms: int) -> list[Any]:
        check_keys("keys", keys)
        Validator.check_args_types([["timeout_ms", timeout_ms, int]])
        Validator.check_param_range("timeout_ms", timeout_ms, 0, Validator.INT32_MAX_SIZE)
        values = self._fetch(keys, timeout_ms)
        if all(v is None for v in values):
            raise not_found(keys)
        return values

    def _read_fast(self, keys: Any, timeout_ms: Any) -> list[Any]:
        """``_read_all`` with the checks inlined for the common case (hot path)."""
        store = self._store
        if (store is None or type(keys) is not list or not keys or type(timeout_ms) is not int
                or not 0 <= timeout_ms <= Validator.INT32_MAX_SIZE
                or not all(type(k) is str and k for k in keys)):
            return self._read_all(keys, timeout_ms)  # the slow path names what is wrong
        try:
            if len(keys) == 1:  # the single-key op is a little cheaper than mget
                try:
                    values = [store.get(keys[0])]
                except KeyNotFound:
                    values = [None]
            else:
                values = store.mget(keys)
        except (StoreError, OSError) as exc:
            raise convert(exc) from exc
        for v in values:
            if v is None:
                values = self._fetch(keys, timeout_ms) if timeout_ms else values
                if all(v is None for v in values):
                    raise not_found(keys)
                break
        return values

    def get(self, keys: list[str], convert_to_str: bool = False, sub_timeout_ms: int = 0) -> list[Any]:
        """Values as ``bytes`` (``str`` with ``convert_to_str``), ``None`` for misses."""
        if keys is None:
            raise invalid("The input of keys list should not be empty")
        values = self._read_fast(keys, sub_timeout_ms)
        out = [None if v is None else owned_bytes(v if type(v) is memoryview else as_bytes_view(v))
               for v in values]
        if convert_to_str:
            return [None if v is None else v.decode() for v in out]
        return out

    def get_buffers(self, keys: list[str], timeout_ms: int = 0) -> list[StateValueBuffer | None]:
        """Zero-copy read-only buffers (``None`` for misses)."""
        Validator.check_args_types([["keys", keys, list], ["timeout_ms", timeout_ms, int]])
        values = self._read_all(keys, timeout_ms)
        return [None if v is None else
                StateValueBuffer.wrap(np.frombuffer(as_bytes_view(v), dtype=np.uint8), k)
                for k, v in zip(keys, values)]

    def get_read_only_buffers(self, keys: list[str] | None = None, timeout_ms: int = 0) -> list[ReadOnlyBuffer | None]:
        """Zero-copy read-only views with read latches (``None`` for misses)."""
        values = self._read_fast(keys, timeout_ms)
        address = self._store.address
        return [None if v is None else ReadOnlyBuffer(v if type(v) is memoryview else as_bytes_view(v), address, k)
                for k, v in zip(keys, values)]

    def read(self, read_params: list[ReadParam]) -> list[ReadOnlyBuffer | None]:
        """Byte ranges ``ReadParam(key, offset, size)`` as read-only buffers."""
        Validator.check_args_types([["read_params", read_params, list]])
        if not read_params:
            raise invalid("The input of read_param list should not be empty")
        out: list[ReadOnlyBuffer | None] = []
        address = self.store.address
        for p in read_params:
            if not isinstance(p, ReadParam):
                raise invalid(f"read_params: items must be ReadParam, got {type(p).__name__}")
            Validator.check_args_types([["key", p.key, str], ["offset", p.offset, int], ["size", p.size, int]])
            try:
                out.append(ReadOnlyBuffer(read_range(self.store, p.key, p.offset, p.size), address, p.key))
            except KeyError:
                out.append(None)
        if all(b is None for b in out):
            raise not_found([p.key for p in read_params])
        return out

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

    def generate_key(self, prefix: str = "") -> str:
        """A unique key: ``prefix`` + a 36-character UUID."""
        Validator.check_args_types([["prefix", prefix, str]])
        self.store  # noqa: B018 - raises if not initialised
        return f"{prefix}{uuid.uuid4()}"

    def exist(self, keys: list[str]) -> list[bool]:
        """Existence of each key (one request)."""
        check_keys("keys", keys)
        if len(keys) > MAX_KEYS:
            raise invalid(f"The objectKeys size exceed {MAX_KEYS}")
        return exists_many(self.store, keys)

    def expire(self, keys: list[str], ttl_second: int) -> list[str]:
        """Sets a new TTL (0 clears it); returns the keys that do not exist."""
        check_keys("keys", keys)
        Validator.check_args_types([["ttl_second", ttl_second, int]])
        Validator.check_uint32("ttl_second", ttl_second)
        with translated():
            return [k for k in keys if not self.store.expire(k, ttl_second or None)]
