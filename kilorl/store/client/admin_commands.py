"""Administrative, stream and replay command groups of the store client."""

from __future__ import annotations

from typing import Any

from kilorl.store.client.connection import Connection
from kilorl.store.client.replay import ReplayTables
from kilorl.store.client.streams import Consumer, Producer


class AdminCommands(Connection):
    """The worker's counters, liveness and shutdown."""

    def stats(self) -> dict[str, Any]:
        """The worker's counters; ``connection`` is this client's: its ``bytes_read`` counts the
        bytes read through requests and, on the worker's host, straight from its version board
        (``board_reads`` of them)."""
        resp, _ = self._call({"op": "stats"})
        resp.pop("ok", None)
        conn = resp.get("connection")
        if isinstance(conn, dict):
            conn["bytes_read"] = conn.get("bytes_read", 0) + self.board_bytes_read
            conn["board_reads"] = self.board_reads
        return resp

    def ping(self) -> bool:
        return bool(self._call({"op": "ping"})[0].get("pong"))

    def flush_releases(self) -> None:
        """Returns leases of dropped views now instead of with the next request."""
        if self._released:
            self._call({"op": "release"})

    def shutdown_worker(self) -> None:
        """Asks the worker to stop cleanly (write-back queue flushed)."""
        self._call({"op": "shutdown"})


class StreamCommands(Connection):
    """Streams: producers and consumer groups over this connection."""

    def producer(self, stream: str, capacity: int | None = None) -> Producer:
        return Producer(self._call, self._check_size, stream, capacity)

    def consumer(self, stream: str, group: str) -> Consumer:
        return Consumer(self._call, stream, group)


class ReplayCommands(Connection):
    """Replay tables (``kilorl.store.client.replay``)."""

    @property
    def replay_tables(self) -> ReplayTables:
        """The worker's replay tables, over this connection (operations retried on reconnect)."""
        group = self.__dict__.get("_replay_tables")
        if group is None:
            group = self._replay_tables = ReplayTables(lambda header, buffers=(): self._retrying(
                self._call, header, buffers))
        return group
