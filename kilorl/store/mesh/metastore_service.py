"""Serves a metastore over the store protocol: the head worker of a built-in cluster.

Each metastore call is one request type (``meta.get``, ``meta.cas``, ...) added to the
worker's op table. Watches are long polls: ``meta.watch`` opens one and returns its id,
``meta.poll`` returns the events queued since (waiting up to a second), so a watch
needs no server push and survives in the same request/reply table. A watch nobody
polls for ``idle_s`` is closed. Metastore errors travel as a name + message
(``wire.ERRORS``) and are re-raised as the same class by ``RemoteMetastore``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.metastore import wire
from kilorl.store.metastore.base import Metastore, MetastoreError, Watch
from kilorl.store.server.request import Reply, arg

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker


class MetastoreService:
    """Hosts ``store`` in a worker: registers the ``meta.*`` ops; closes it at shutdown."""

    def __init__(self, store: Metastore, idle_s: float = 30.0):
        self.store = store
        self.idle_s = idle_s
        self._watches: dict[int, tuple[Watch, float]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def install(self, worker: Worker) -> None:
        ops: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "meta.get": lambda h: {"kv": wire.kv_out(self.store.get(bytes(arg(h, "key", bytes))))},
            "meta.range": self._range,
            "meta.put": lambda h: {"rev": self.store.put(bytes(arg(h, "key", bytes)), bytes(arg(h, "value", bytes)),
                                                         arg(h, "lease", int, 0))},
            "meta.delete": lambda h: {"found": self.store.delete(bytes(arg(h, "key", bytes)))},
            "meta.delete_prefix": lambda h: {"n": self.store.delete_prefix(bytes(arg(h, "prefix", bytes)))},
            "meta.cas": lambda h: wire.cas_out(self.store.compare_and_swap(
                bytes(arg(h, "key", bytes)), arg(h, "expect", int), bytes(arg(h, "value", bytes)),
                arg(h, "lease", int, 0))),
            "meta.cad": lambda h: wire.cas_out(self.store.compare_and_delete(bytes(arg(h, "key", bytes)),
                                                                             arg(h, "expect", int))),
            "meta.grant": self._grant,
            "meta.keepalive": lambda h: {"ttl": self.store.keepalive(arg(h, "lease", int))},
            "meta.revoke": lambda h: {"done": self.store.revoke(arg(h, "lease", int)) is None},
            "meta.ttl": lambda h: {"ttl": self.store.lease_time_to_live(arg(h, "lease", int))},
            "meta.revision": lambda h: {"rev": self.store.revision()},
            "meta.watch": self._watch,
            "meta.poll": self._poll,
            "meta.unwatch": self._unwatch,
        }
        for name, fn in ops.items():
            worker.register(name, _wrap(fn))

    def _range(self, h: dict[str, Any]) -> dict[str, Any]:
        result = self.store.range(bytes(arg(h, "prefix", bytes)))
        return {"kvs": [wire.kv_out(kv) for kv in result.kvs], "rev": result.revision}

    def _grant(self, h: dict[str, Any]) -> dict[str, Any]:
        lease = self.store.grant_lease(arg(h, "ttl", (int, float)))
        return {"id": lease.id, "ttl": lease.ttl}

    def _watch(self, h: dict[str, Any]) -> dict[str, Any]:
        watch = self.store.watch(bytes(arg(h, "prefix", bytes)), arg(h, "start", int, 0))
        with self._lock:
            wid = next(self._ids)
            self._watches[wid] = (watch, time.monotonic())
            self._close_idle()
        return {"id": wid}

    def _close_idle(self) -> None:
        now = time.monotonic()
        for wid, (watch, seen) in list(self._watches.items()):
            if now - seen > self.idle_s:
                del self._watches[wid]
                watch.close()

    def _poll(self, h: dict[str, Any]) -> dict[str, Any]:
        wid = arg(h, "id", int)
        timeout = min(float(arg(h, "timeout", (int, float), 1.0)), 5.0)
        with self._lock:
            entry = self._watches.get(wid)
            if entry is None:
                raise MetastoreError(f"watch {wid} is unknown (closed or idle too long)")
            self._watches[wid] = (entry[0], time.monotonic())
        watch = entry[0]
        events = []
        batch = watch.get(timeout=timeout)  # raises the watch's terminal error
        while batch:
            events += [wire.event_out(e) for e in batch]
            if len(events) > 1000:
                break
            batch = watch.get(timeout=0)
        return {"events": events}

    def _unwatch(self, h: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            entry = self._watches.pop(arg(h, "id", int), None)
        if entry is not None:
            entry[0].close()
        return {}

    # -- worker service hooks ------------------------------------------------------------
    def start(self, worker: Worker) -> None:
        pass

    def stop(self) -> None:
        with self._lock:
            watches, self._watches = list(self._watches.values()), {}
        for watch, _ in watches:
            watch.close()
        self.store.close()


def _wrap(fn: Callable[[dict[str, Any]], dict[str, Any]]):
    def handler(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
        try:
            return Reply(fn(h))
        except MetastoreError as exc:
            return Reply({"merr": wire.error_name(exc), "msg": str(exc)})
        except (TypeError, ValueError) as exc:
            from kilorl.store.errors import InvalidRequest

            raise InvalidRequest(str(exc)) from None
    return handler
