"""``Validator``, ``Status`` and ``Context`` with openYuanrong's behaviour.

openYuanrong checks argument types strictly (``type(x) is T``: a ``bool`` is not an
``int``) and raises ``TypeError``; a value out of range raises ``RuntimeError``.
"""

from __future__ import annotations

import threading
from typing import Any

from kilorl.store.yuanrong.errors import DsInvalidArgument, DsTypeError, invalid


class Validator:
    """Argument checks shared by every client of this package."""

    INT32_MAX_SIZE = 0x7FFFFFFF
    UINT32_MAX_SIZE = 2**32 - 1
    UINT64_MAX_SIZE = 2**64 - 1

    @staticmethod
    def check_args_types(args: list[list[Any]]) -> None:
        """``args`` is ``[[name, value, type, type, ...], ...]``; exact type match required."""
        for name, value, *types in args:
            if not any(type(value) is t for t in types):
                names = ", ".join(getattr(t, "__name__", str(t)) for t in types)
                raise DsTypeError(f"The input of {name} has invalid type {type(value).__name__}, "
                                  f"valid type: {names}")

    @staticmethod
    def check_param_range(param_name: str, param_value: int, min_limit: int, max_limit: int) -> None:
        if not min_limit <= param_value <= max_limit:
            raise invalid(f"Invalid {param_name} size {param_value} is set, which should be between "
                          f"[{min_limit},{max_limit}]")

    @staticmethod
    def check_uint32(name: str, value: int) -> None:
        """TTLs are uint32 in openYuanrong's C++ core: outside that range is a TypeError there."""
        if not 0 <= value <= Validator.UINT32_MAX_SIZE:
            raise DsTypeError(f"The input of {name} must fit an unsigned 32-bit integer, got {value}")

    @staticmethod
    def check_key_exists(args: dict[str, Any], keys: list[str]) -> list[Any]:
        if type(args) is not dict:
            raise DsTypeError(f"The input of args should be dict, error type: {type(args).__name__}")
        missing = [k for k in keys if args.get(k) is None]
        if missing:
            raise DsTypeError(f"The key '{missing[0]}' of the input param does not exist")
        return [args[k] for k in keys]


class Status:
    """Result of ``health_check``: ``is_ok()``, ``is_error()``, ``to_string()``."""

    def __init__(self, ok: bool = True, message: str = ""):
        self._ok, self._message = ok, message

    def is_ok(self) -> bool:
        return self._ok

    def is_error(self) -> bool:
        return not self._ok

    def to_string(self) -> str:
        return "code: [OK]" if self._ok else self._message

    def __repr__(self) -> str:
        return f"Status({self.to_string()!r})"


_local = threading.local()
_TRACE_ID_MAX = 36


class Context:
    """Per-thread trace id; kiloRL keeps it for the caller (``Context.trace_id()``)."""

    @staticmethod
    def set_trace_id(trace_id: str) -> None:
        Validator.check_args_types([["trace_id", trace_id, str]])
        if len(trace_id) > _TRACE_ID_MAX:
            raise DsInvalidArgument(f"trace_id: at most {_TRACE_ID_MAX} characters, got {len(trace_id)}")
        _local.trace_id = trace_id

    @staticmethod
    def trace_id() -> str:
        return getattr(_local, "trace_id", "")
