"""Global reference counts and nesting of objects, kept as small records in the store.

openYuanrong deletes an object when its global reference count falls back to zero, and a
parent published with ``nested_object_keys`` keeps its children alive. Both are records
under reserved keys (``__yr__/gref/<key>``, ``__yr__/nest/<key>``, ``__yr__/nestedby/<key>``).
Counts use the worker's atomic ``incr`` (exact under concurrent clients; a count record
stays at 0 rather than being deleted, so a racing increment is never lost). The nesting
lists are still read-modify-write: exact for one client at a time.
"""

from __future__ import annotations

import json

from kilorl.store.client import StoreClient
from kilorl.store.yuanrong.errors import translated

PREFIX = "__yr__/"


def _get_int(store: StoreClient, key: str) -> int:
    value = store.mget([key])[0]
    return int(bytes(value).decode() if not isinstance(value, str) else value) if value is not None else 0


def _get_list(store: StoreClient, key: str) -> list[str]:
    value = store.mget([key])[0]
    if value is None:
        return []
    return json.loads(bytes(value).decode() if not isinstance(value, str) else value)


def _put_list(store: StoreClient, key: str, items: list[str]) -> None:
    if items:
        store.set(key, json.dumps(items).encode())
    else:
        store.delete(key)


def add_floored(store: StoreClient, key: str, delta: int) -> tuple[int, int]:
    """(old, new) of an atomic ``incr`` of ``key`` that never leaves it below zero: the part
    of a decrement that went below zero is given back (exact under concurrent callers)."""
    raw = store.incr(key, delta)
    if raw < 0:
        store.incr(key, min(-raw, -delta))
    return max(0, raw - delta), max(0, raw)


class RefTable:
    """Reference counts and nesting for one worker connection."""

    def __init__(self, store: StoreClient):
        self.store = store

    def count(self, key: str) -> int:
        with translated():
            return max(0, _get_int(self.store, f"{PREFIX}gref/{key}"))

    def add(self, key: str, delta: int) -> int:
        """Adds ``delta`` (never below zero); at zero the object goes unless a parent holds it."""
        with translated():
            old, new = add_floored(self.store, f"{PREFIX}gref/{key}", delta)
            if old > 0 and new == 0 and not _get_list(self.store, f"{PREFIX}nestedby/{key}"):
                self.drop(key)
            return new

    def nest(self, parent: str, children: list[str]) -> None:
        """Records that ``parent`` holds ``children`` (publish / seal with nested keys)."""
        if not children:
            return
        with translated():
            _put_list(self.store, f"{PREFIX}nest/{parent}", sorted(set(children)))
            for child in children:
                parents = _get_list(self.store, f"{PREFIX}nestedby/{child}")
                if parent not in parents:
                    _put_list(self.store, f"{PREFIX}nestedby/{child}", parents + [parent])

    def drop(self, key: str) -> None:
        """Deletes ``key`` and, recursively, children nobody references any more."""
        with translated():
            children = _get_list(self.store, f"{PREFIX}nest/{key}")
            self.store.delete(key, f"{PREFIX}nest/{key}", f"{PREFIX}gref/{key}")
            for child in children:
                parents = [p for p in _get_list(self.store, f"{PREFIX}nestedby/{child}") if p != key]
                _put_list(self.store, f"{PREFIX}nestedby/{child}", parents)
                if not parents and self.count(child) == 0:
                    self.drop(child)
