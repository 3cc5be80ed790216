"""What every openYuanrong-style client shares: the connection, ``init``, ``health_check``.

A client is built unconnected (as in openYuanrong) and connects in ``init()``; an empty
host or a zero port is taken from ``DATASYSTEM_HOST`` / ``DATASYSTEM_PORT``. The token
``""`` means kiloRL's usual lookup (``KILORL_STORE_TOKEN``, then the worker's run
directory on loopback). ``DsClient`` shares one native connection among its clients.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from kilorl.store.client import StoreClient
from kilorl.store.errors import KeyNotFound, StoreTimeout
from kilorl.store.yuanrong.errors import DsNotReady, invalid, translated
from kilorl.store.yuanrong.util import Status, Validator


class Connected:
    """A lazily connected native ``StoreClient`` with openYuanrong's constructor fields."""

    def __init__(self, host: str, port: int, connect_timeout_ms: int, token: str):
        Validator.check_args_types([["host", host, str], ["port", port, int],
                                    ["connect_timeout_ms", connect_timeout_ms, int], ["token", token, str]])
        Validator.check_param_range("connect_timeout_ms", connect_timeout_ms, 0, Validator.INT32_MAX_SIZE)
        self._host, self._port = host, port
        self._connect_timeout_ms, self._token = connect_timeout_ms, token
        self._store: StoreClient | None = None
        self._owns = False

    def _address(self) -> str:
        host = self._host or os.environ.get("DATASYSTEM_HOST", "")
        port_text = str(self._port) if self._port else os.environ.get("DATASYSTEM_PORT", "")
        if not host or not port_text:
            raise invalid("host/port: empty, and DATASYSTEM_HOST / DATASYSTEM_PORT are not set")
        try:
            port = int(port_text)
        except ValueError:
            raise invalid(f"DATASYSTEM_PORT: not an integer: {port_text!r}") from None
        return f"{host}:{port}"

    def init(self) -> None:
        """Connects to the worker; a failure raises ``RuntimeError``."""
        if self._store is not None:
            return
        timeout = (self._connect_timeout_ms or 60000) / 1000
        with translated():
            self._store = StoreClient(self._address(), token=self._token or None, connect_timeout=timeout)
        self._owns = True

    def _open_extra(self, zero_copy: bool = True) -> StoreClient:
        """Another connection to the same worker, for calls that block (a wait must not
        hold the shared connection that other threads of this client use)."""
        with translated():
            return StoreClient(self.store.address, token=self._token or None, zero_copy=zero_copy,
                               connect_timeout=(self._connect_timeout_ms or 60000) / 1000)

    def _attach(self, store: StoreClient) -> None:
        """Uses a connection owned by someone else (``DsClient``)."""
        self._store, self._owns = store, False

    @property
    def store(self) -> StoreClient:
        """The native client (versions, streams, zero-copy gets, ...)."""
        if self._store is None:
            raise DsNotReady("code: [Not ready], msg: [The client has not been initialized yet; call init()]")
        return self._store

    def health_check(self) -> Status:
        if self._store is None:
            return Status(False, "code: [Not ready], msg: [The client has not been initialized yet]")
        try:
            return Status(bool(self._store.ping()))
        except Exception as exc:  # a health check reports, it does not raise
            return Status(False, f"code: [K_RPC_UNAVAILABLE], msg: [{exc}]")

    def close(self) -> None:
        """Closes the connection if this client opened it (not part of openYuanrong's API)."""
        if self._store is not None and self._owns:
            self._store.close()
        self._store = None

    # -- helpers shared by the KV and object clients ------------------------------------
    def _fetch(self, keys: Sequence[str], timeout_ms: int) -> list[Any]:
        """Values of ``keys`` (``None`` where missing), waiting up to ``timeout_ms`` for misses.

        Waits run on a connection of their own (values copied, not leased), so other
        threads sharing this client are not held up.
        """
        with translated():
            values = self.store.mget(list(keys))
        if timeout_ms <= 0 or all(v is not None for v in values):
            return values
        deadline = time.monotonic() + timeout_ms / 1000
        waiter = self._open_extra(zero_copy=False)
        try:
            for i, key in enumerate(keys):
                remaining = deadline - time.monotonic()
                if values[i] is not None or remaining <= 0:
                    continue
                try:
                    with translated():
                        values[i] = waiter.get(key, timeout=remaining)
                except (KeyNotFound, StoreTimeout):
                    pass
        finally:
            waiter.close()
        return values


def check_keys(name: str, keys: Any, allow_empty: bool = False) -> list[str]:
    """A list of non-empty str keys (openYuanrong: list type, str items)."""
    Validator.check_args_types([[name, keys, list]])
    if not keys and not allow_empty:
        raise invalid(f"Invalid parameter: the input of {name} list should not be empty")
    for k in keys:
        if type(k) is not str:
            from kilorl.store.yuanrong.errors import DsTypeError

            raise DsTypeError(f"The input of {name} should be a list of str, got an item of type {type(k).__name__}")
        if not k:
            raise invalid("The objectKey should not be empty.")
    return keys
