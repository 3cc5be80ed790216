"""What an op handler gets and returns: validated request fields and a ``Reply``.

Shared by the worker's own handlers and by the op tables that layers above add
(multi-node ops, the hosted metastore), so none of them needs the worker module.
"""

from __future__ import annotations

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
