"""Waiting on Ray refs while the driver keeps its other duties (docs/monitor.md, "Migration execution").

The data paths spend most of the driver's time waiting: for rollouts, for the learners'
updates. A leak of 100 MiB/s reaches a 2 GiB budget in seconds, so migration decisions
cannot wait for the iteration to end: while it waits, a data path wakes every
``WAIT_TICK_S`` and calls its ``on_wait`` hook (the migrator's round), saying whether a
learner update is in flight (then only actors are replaced; a learner or store swap waits
until no update is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WaitHook = Callable[[bool], None]
"""Called while a data path waits; its argument: a learner update is in flight."""

WAIT_TICK_S = 0.2
"""How often a waiting data path calls its hook (the hook itself decides whether a round is due)."""


class RunStopped(RuntimeError):
    """Raised by a hook whose migration could not be carried out: the run stops (exit code 3)."""


def wait_some(refs: list[Any], hook: WaitHook | None, updating: bool, num_returns: int = 1) -> list[Any]:
    """The refs of ``refs`` that are ready, at least ``num_returns`` of them (a failed one counts as ready).

    With no hook this is one blocking ``ray.wait``; with one, the hook runs every
    ``WAIT_TICK_S`` until enough are ready.
    """
    import ray

    if not refs:
        return []
    num_returns = min(num_returns, len(refs))
    if hook is None:
        return ray.wait(refs, num_returns=num_returns)[0]
    while True:
        done, _ = ray.wait(refs, num_returns=num_returns, timeout=WAIT_TICK_S)
        if len(done) >= num_returns:
            return ray.wait(refs, num_returns=len(refs), timeout=0)[0]  # everything that is in by now
        hook(updating)
