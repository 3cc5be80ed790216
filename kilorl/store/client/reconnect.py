"""Riding out a lost connection: reconnect with backoff until a deadline, then repeat or report.

A worker killed and restarted by its owner (``WorkerProcess``: same port, empty memory)
is down for as long as its start takes, which on a loaded machine is seconds, not
milliseconds. A client that meets the broken connection therefore does not give up on the
first refused reconnect: ``ride_out`` tries again (this worker, or another member of its
cluster) with a doubling pause, until ``timeout_s`` has passed since the connection was
lost (``StoreClient(reconnect_timeout=...)``; a run sets it from
``store.reconnect_timeout_s``). Then ``WorkerUnreachable`` is raised, naming the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kilorl.store.errors import AuthError, ConnectionLost, Reconnected, StoreError, WorkerLeaving, WorkerUnreachable

T = TypeVar("T")

RECONNECT_TIMEOUT_S = 60.0
"""Default seconds a client keeps reconnecting after a lost connection before it gives up."""
FIRST_PAUSE_S = 0.05
"""Pause before the second reconnect attempt (the first is immediate: a failover target may be up)."""
MAX_PAUSE_S = 0.5
"""Longest pause between two reconnect attempts (the pause doubles up to it)."""


def ride_out(op: Callable[[], T], reconnect: Callable[[Exception], None], timeout_s: float,
             replay: bool = True, where: Callable[[], str] = lambda: "the worker") -> T:
    """``op()``; on a lost connection (or a leaving worker) ``reconnect(err)`` until it succeeds
    or ``timeout_s`` has passed since the loss, then ``op()`` again (``replay``) or
    ``Reconnected`` (not ``replay``). ``where()`` names the worker in the give-up error."""
    while True:
        try:
            return op()
        except Reconnected:
            raise  # a nested client call already reconnected: the caller decides
        except (ConnectionLost, WorkerLeaving) as lost:
            _reconnect(lost, reconnect, timeout_s, where)
            if not replay:
                raise Reconnected(f"{lost}; reconnected to {where()}, the operation was not repeated") from lost


def _reconnect(lost: Exception, reconnect: Callable[[Exception], None], timeout_s: float,
               where: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    pause, last = FIRST_PAUSE_S, lost
    while True:
        try:
            reconnect(last)
            return
        except AuthError:
            raise  # a wrong token stays wrong
        except (OSError, StoreError) as err:
            last = err
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerUnreachable(f"connection to {where()} lost and not made again within {timeout_s:g}s "
                                    f"(reconnect_timeout; store.reconnect_timeout_s in a run config); "
                                    f"last error: {last}") from lost
        time.sleep(min(pause, left))
        pause = min(2 * pause, MAX_PAUSE_S)
