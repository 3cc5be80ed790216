"""Keep a lease alive from a background thread, and say when it is lost."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kilorl.store.metastore.base import LeaseNotFound, Metastore, MetastoreClosed, MetastoreError

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Refreshes ``lease_id`` every ``ttl / 3`` seconds until stopped.

    If the lease is gone (it expired, e.g. after a long pause, or was revoked by
    someone else) or the metastore stays unreachable past the TTL, ``on_lost`` is
    called once from the keeper thread and the keeper stops: the holder's keys are
    gone and it must re-register.
    """

    def __init__(
        self,
        store: Metastore,
        lease_id: int,
        ttl: float,
        on_lost: Callable[[Exception], None] | None = None,
        name: str = "lease-keeper",
    ):
        self.store = store
        self.lease_id = lease_id
        self.ttl = ttl
        self.on_lost = on_lost
        self._stop = threading.Event()
        self.lost: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        interval = max(0.1, self.ttl / 3)
        last_ok = time.monotonic()
        while not self._stop.wait(interval):
            try:
                self.store.keepalive(self.lease_id)
                last_ok = time.monotonic()
            except LeaseNotFound as exc:
                self._lose(exc)
                return
            except MetastoreClosed:
                return  # our owner is shutting down
            except MetastoreError as exc:
                if time.monotonic() - last_ok > self.ttl:
                    self._lose(exc)
                    return
                log.warning("keepalive of lease %s failed, retrying: %s", self.lease_id, exc)

    def _lose(self, exc: Exception) -> None:
        self.lost = exc
        if self.on_lost is not None and not self._stop.is_set():
            try:
                self.on_lost(exc)
            except Exception:  # a callback bug must not kill silently without a trace
                log.exception("on_lost callback of lease %s failed", self.lease_id)

    def stop(self) -> None:
        """Stop refreshing (the lease then expires on its own unless revoked)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
