"""Riding out a store worker that died and came back (same address, empty memory tiers).

A connection error makes the caller drop its clients and try again (bounded by a deadline),
so a worker restarted on its port is reached again. A publish that finds a version already
there (it got through before the connection broke) counts as done. A reader whose worker
came back without the parameters raises ``ParametersLost``: someone must republish.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

RECONNECT_S = 30.0
"""How long an operation keeps reconnecting before the connection error is raised."""


class ParametersLost(ConnectionError):
    """The worker came back without the parameters (not durable): the writer must republish."""


def with_reconnect(fn: Callable[[], T], reset: Callable[[], None], deadline_s: float = RECONNECT_S) -> T:
    """``fn()``; on a connection error ``reset()`` (drop clients) and retry with backoff."""
    deadline = time.monotonic() + deadline_s
    delay = 0.05
    while True:
        try:
            return fn()
        except ParametersLost:
            raise
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            reset()
            time.sleep(delay)
            delay = min(2 * delay, 1.0)


def publish_once(client: Any, key: str, version: int, value: Any, kw: dict[str, Any]) -> None:
    """Publish, treating "that version is already there" as success (a retried publish)."""
    from kilorl.store import InvalidRequest

    try:
        client.publish(key, value, version=version, **kw)
    except InvalidRequest:
        latest = client.latest_version(key)
        if latest is None or latest < version:
            raise
