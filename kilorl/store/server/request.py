"""What an op handler gets and returns: validated request fields and a ``Reply``.

Shared by the worker's own handlers and by the op tables that layers above add
(multi-node ops, the hosted metastore), so none of them needs the worker module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kilorl.store.errors import InvalidRequest

_MISSING = object()


@dataclass
class Reply:
    """Response header, payload buffers, and a callback run after sending."""

    header: dict[str, Any] = field(default_factory=dict)
    buffers: list[Any] = field(default_factory=list)
    after: Callable[[], None] | None = None


Handler = Callable[[Any, Any, dict[str, Any]], Reply]
"""``handler(worker, connection, header) -> Reply``."""


class OpTable(dict):
    """op name -> handler; ``@table.op("get")`` registers a handler."""

    def op(self, name: str) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            if name in self:
                raise ValueError(f"op {name!r} registered twice")
            self[name] = fn
            return fn
        return deco


def arg(header: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = _MISSING) -> Any:
    """A validated request field; errors name the field."""
    value = header.get(name, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise InvalidRequest(f"{name}: required field missing")
        return default
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise InvalidRequest(f"{name}: expected {types}, got {type(value).__name__}")
    return value


def user_key(header: dict[str, Any]) -> str:
    key = arg(header, "key", str)
    if not key or len(key) > 4096:
        raise InvalidRequest("key: must be a non-empty string of at most 4096 characters")
    if key.startswith("\x00"):
        raise InvalidRequest("key: keys starting with NUL are reserved (versioned objects)")
    return key


def ttl_field(header: dict[str, Any]) -> float | None:
    ttl = arg(header, "ttl", (int, float), None)
    if ttl is not None and (not math.isfinite(ttl) or ttl <= 0):
        raise InvalidRequest(f"ttl: must be a positive number of seconds, got {ttl}")
    return ttl
