"""Riding out a store worker that died and came back (same address, empty memory tiers).

The parameter store's clients reconnect by themselves, with backoff, until the run's
``store.reconnect_timeout_s`` (``kilorl.store.client.reconnect``), and then raise
``Reconnected`` instead of repeating the operation: here the operation is repeated, once the
reader has checked what the worker still holds. A reader whose worker came back without the
parameters raises ``ParametersLost``: someone must republish. A publish that finds a version
already there (it got through before the connection broke) counts as done. A client that
cannot be made at all (its worker not serving yet) is tried again until the same deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kilorl.store.client.reconnect import FIRST_PAUSE_S, MAX_PAUSE_S, RECONNECT_TIMEOUT_S
from kilorl.store.errors import Reconnected, WorkerUnreachable

T = TypeVar("T")

__all__ = ["RECONNECT_TIMEOUT_S", "ParametersLost", "publish_once", "with_reconnect"]


class ParametersLost(ConnectionError):
    """The worker came back without the parameters (not durable): the writer must republish."""


def with_reconnect(fn: Callable[[], T], reset: Callable[[], None], deadline_s: float = RECONNECT_TIMEOUT_S) -> T:
    """``fn()``, repeated after its client reconnected (``Reconnected``); after another
    connection error (no client could be made) ``reset()`` (drop clients) and retry with
    backoff until ``deadline_s`` has passed since the first one. ``WorkerUnreachable`` (a
    client already waited out its own deadline) and ``ParametersLost`` are raised."""
    deadline = None
    pause = FIRST_PAUSE_S
    while True:
        try:
            return fn()
        except (ParametersLost, WorkerUnreachable):
            raise
        except Reconnected:
            continue  # the client is connected again: repeat at once
        except ConnectionError:
            now = time.monotonic()
            deadline = now + deadline_s if deadline is None else deadline
            if now > deadline:
                raise
            reset()
            time.sleep(min(pause, max(0.0, deadline - now)))
            pause = min(2 * pause, MAX_PAUSE_S)


def publish_once(client: Any, key: str, version: int, value: Any, kw: dict[str, Any]) -> None:
    """Publish, treating "that version is already there" as success (a retried publish)."""
    from kilorl.store import InvalidRequest

    try:
        client.publish(key, value, version=version, **kw)
    except InvalidRequest:
        latest = client.latest_version(key)
        if latest is None or latest < version:
            raise
