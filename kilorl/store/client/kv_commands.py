"""Key-value commands of the store client: values under keys, counters, TTLs, pins."""

from __future__ import annotations

from typing import Any

from kilorl.store.client.connection import Connection
from kilorl.store.client.types import WriteMode
from kilorl.store.errors import InvalidRequest


class KVCommands(Connection):
    """Values under keys (bytes, str, arrays, tensors, dicts of them) on one worker or its mesh."""

    def set(self, key: str, value: Any, write_mode: WriteMode = WriteMode.NONE_L2, ttl: float | None = None,
            tier: str | None = None, pin: bool = False, if_absent: bool = False) -> bool:
        """Stores ``value`` (bytes, str, ndarray, tensor, dict of them) under ``key``.

        ``if_absent``: only if the key does not exist yet, decided atomically by the worker
        (on a mesh by the key's ring owner): of concurrent writers exactly one stores.
        Returns whether the value was stored (always True without ``if_absent``)."""
        fields = {"key": key, "mode": WriteMode(write_mode).value, "ttl": ttl, "tier": tier, "pin": pin}
        if if_absent:
            fields["nx"] = True
        resp = self._retrying(lambda: self._write(dict(fields), value))
        return bool(resp.get("stored", True))

    def incr(self, key: str, delta: int = 1) -> int:
        """Adds ``delta`` to the integer counter ``key`` (absent: 0) atomically in the worker
        (on a mesh on the key's ring owner) and returns the new value. The counter is stored
        as decimal bytes: ``get`` returns e.g. ``b"42"``. A retry after a lost connection
        may apply ``delta`` twice."""
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise InvalidRequest(f"delta: expected an int, got {type(delta).__name__}")
        return int(self._retrying(lambda: self._call({"op": "incr", "key": key, "delta": delta}))[0]["value"])

    def get(self, key: str, timeout: float | None = None) -> Any:
        """The value of ``key``; local large values are read-only zero-copy views.

        With ``timeout`` it waits that long for the key to appear.
        """
        def once() -> Any:
            resp, payload = self._call({"op": "get", "key": key, "zc": self._zc(), "timeout": timeout})
            return self._materialize(resp, payload)
        return self._retrying(once)

    def get_range(self, key: str, offset: int, length: int) -> memoryview:
        """``length`` bytes of ``key`` from byte ``offset`` on, as a read-only buffer (a
        zero-copy view of the local arena for large ranges). From a remote holder only these
        bytes move. ``describe`` gives the offsets of a stored dict's tensors."""
        def once() -> Any:
            resp, payload = self._call({"op": "get_range", "key": key, "offset": offset, "length": length,
                                        "zc": self._zc()})
            return self._materialize(resp, payload)
        return self._retrying(once)

    def describe(self, key: str) -> dict[str, Any]:
        """What ``key`` holds without reading it: ``type`` and ``size``; arrays/tensors add
        ``dtype`` and ``shape``; a dict adds ``entries``: name -> ``kind``, ``dtype``,
        ``shape``, byte ``offset`` and ``nbytes``."""
        resp, _ = self._retrying(lambda: self._call({"op": "describe", "key": key}))
        resp.pop("ok", None)
        return resp

    def mset(self, items: dict[str, Any], write_mode: WriteMode = WriteMode.NONE_L2, ttl: float | None = None,
             tier: str | None = None) -> None:
        for key, value in items.items():
            self.set(key, value, write_mode=write_mode, ttl=ttl, tier=tier)

    def mget(self, keys: list[str]) -> list[Any]:
        """Values of ``keys`` in order, ``None`` for missing ones."""
        resp, payload = self._retrying(lambda: self._call({"op": "mget", "keys": list(keys), "zc": self._zc()}))
        return self._materialize_items(resp["items"], payload)

    def delete(self, *keys: str) -> int:
        return self._retrying(lambda: self._call({"op": "delete", "keys": list(keys)}))[0]["n"]

    def exists(self, key: str) -> bool:
        return self.exists_many([key])[0]

    def exists_many(self, keys: list[str]) -> list[bool]:
        """Whether each of ``keys`` exists (anywhere on a mesh), in order, in one request."""
        keys = list(keys)
        if not all(isinstance(k, str) for k in keys):
            raise InvalidRequest("keys: every key must be a string")
        found = self._retrying(lambda: self._call({"op": "exists", "keys": keys}))[0]["found"]
        return [bool(f) for f in found]

    def expire(self, key: str, ttl: float | None) -> bool:
        """Sets (or with ``None`` clears) a key's time to live; False if the key is absent."""
        return self._call({"op": "expire", "key": key, "ttl": ttl})[0]["found"]

    def keys(self, prefix: str = "", local_only: bool = False) -> list[str]:
        """Keys starting with ``prefix``, sorted; on a mesh every worker's keys once each
        (``local_only``: just the keys whose bytes this worker holds). Versioned objects
        (``publish``) are not keys: ``version_list`` lists their names and versions."""
        header = {"op": "keys", "prefix": prefix, "local_only": local_only}
        return self._retrying(lambda: self._call(dict(header)))[0]["keys"]

    def pin(self, key: str, on: bool = True) -> None:
        """Keeps an object in its current tier (no demotion, no eviction) until unpinned."""
        self._call({"op": "pin", "key": key, "on": on})

    def unpin(self, key: str) -> None:
        self.pin(key, False)

    def locate(self, key: str) -> dict[str, Any]:
        """Where an object lives (tier, arena offset, heat, L2 state): for tools and tests."""
        resp, _ = self._call({"op": "locate", "key": key})
        resp.pop("ok", None)
        return resp

