"""Versioned-object commands of the store client: publish a name's next version, read one or
several names at one version (from the worker's version board on its host, else by request)."""

from __future__ import annotations

from typing import Any

from kilorl.store.client import board_writes
from kilorl.store.client.batches import publish_batch
from kilorl.store.client.board_reads import CopyInto, board_read, head_only
from kilorl.store.client.board_writes import BoardPublisher
from kilorl.store.client.connection import Connection
from kilorl.store.client.types import Versioned, WriteMode
from kilorl.store.errors import StoreTimeout
from kilorl.store.wire import codec as serialization
from kilorl.store.wire.board import ClientSlots


class VersionCommands(Connection):
    """Versioned names: one history per name, whichever member of a mesh is asked."""

    def publish(self, name: str, value: Any, version: int | None = None,
                write_mode: WriteMode = WriteMode.NONE_L2) -> int:
        """Publishes ``value`` as the next version of ``name`` and returns its number.

        ``version`` picks the number (it must be newer than the latest); by default it is
        the latest + 1. On a mesh of workers the history is one per name, whichever
        worker a publisher or reader talks to."""
        fields = {"ver": [name, version], "mode": WriteMode(write_mode).value}
        return self._retrying(lambda: self._write(dict(fields), value))["version"]

    def publish_many(self, items: list[tuple[str, Any, int | None]],
                     write_mode: WriteMode = WriteMode.NONE_L2, on_board: bool = False) -> list[int]:
        """Publishes ``items`` = [(name, value, version or None), ...] in order, pipelined:
        one round trip for all (two when values go through the arena), and the first
        failure stops the rest (they are not published and its error is raised), so a
        part published last, e.g. a commit record, is only there when all before it are.

        ``on_board``: on the worker's host, a publish of small versions with their numbers
        given names them on the worker's version board itself, before the commit request,
        so readers there wake one process hop sooner (``kilorl.store.client.board_writes``).
        The names' board slots are then this client's until it disconnects; other clients'
        versions of them are read by request."""
        mode = WriteMode(write_mode).value

        def once() -> list[int]:
            if on_board:
                got = self._publish_on_board(items, mode)
                if got is not None:
                    return got
            return publish_batch(self._pipeline, self._check_size, self.arena, self.inline_threshold, items, mode)
        return self._retrying(once)

    def _publish_on_board(self, items: list[tuple[str, Any, int | None]], mode: str) -> list[int] | None:
        board, arena = self.board, self.arena
        if board is None or arena is None or board.stale:
            return None
        encoded = [serialization.encode(value) for _, value, _ in items]
        if not board_writes.eligible(items, encoded, mode):
            return None
        with self._board_pub_lock:
            pub = self._board_pub
            if pub is None or pub.epoch != self._epoch:
                pub = self._board_pub = BoardPublisher(ClientSlots(board.arena), arena, self._epoch)
        return pub.publish(self._pipeline, items, encoded)

    def latest_version(self, name: str) -> int | None:
        return self._retrying(lambda: self._call({"op": "latest_version", "name": name}))[0]["version"]

    def get_version(self, name: str, version: int | None = None,
                    ranges: list[tuple[int, int]] | None = None) -> Versioned:
        """One version (the latest by default) as ``(version, value)``, read as one whole.

        With ``ranges`` = [(offset, length), ...] the value is a list of read-only buffers,
        one per range; from a remote holder only those bytes move (``describe`` of a
        dict gives its tensors' offsets)."""
        header = {"op": "get_version", "name": name, "version": version, "zc": self._zc(),
                  "ranges": [list(r) for r in ranges] if ranges is not None else None}

        def once() -> Versioned:
            resp, payload = self._call(dict(header))
            if ranges is None:
                return Versioned(resp["version"], self._materialize(resp, payload))
            return Versioned(resp["version"], self._materialize_items(resp["items"], payload))
        return self._retrying(once)

    def get_versions(self, reads: list[tuple[str, list[tuple[int, int]] | None]], version: int | None = None,
                     min_version: int | None = None, timeout: float | None = None) -> Versioned:
        """Several published names at one version number, in one request: ``(version, values)``.

        ``reads`` = [(name, ranges or None), ...]; the first name is the anchor (for an
        object published as parts, the part published last). The version is ``version``,
        else the anchor's latest, after waiting (up to ``timeout``) for it to reach
        ``min_version``: a wait whose wake-up brings the bytes. ``values[i]`` is the whole
        value of ``reads[i]``, or one read-only buffer per range. A name not held at that
        version raises ``VersionGone``."""
        if self.board is not None and self.arena is not None:
            got, timeout = board_read(self.board, self.arena.view, reads, version, min_version, timeout,
                                      self.latest_version, self._connected)
            if got is not None:
                self.board_reads += 1
                self.board_bytes_read += got[1]
                return got[0]
        wire = [[name, [list(r) for r in ranges] if ranges is not None else None] for name, ranges in reads]
        header = {"op": "get_versions", "reads": wire, "version": version, "min_version": min_version,
                  "timeout": timeout, "zc": self._zc()}
        if self.pull_whole:
            header["pull_whole"] = True

        def once() -> Versioned:
            resp, payload = self._call(dict(header))
            flat = self._materialize_items(resp["items"], payload)
            values, pos = [], 0
            for _, ranges in reads:
                n = 1 if ranges is None else len(ranges)
                values.append(flat[pos] if ranges is None else flat[pos:pos + n])
                pos += n
            return Versioned(resp["version"], values)
        return self._retrying(once)

    def wait_version(self, name: str, min_version: int, timeout: float | None = None,
                     committed: bool = False) -> int:
        """Blocks until ``name`` reaches ``min_version`` (or ``timeout``); returns the latest
        (on the worker's host: the board's, when it names ``name`` at ``min_version`` or later).

        ``committed``: ask the worker, never the board. A publisher on the worker's host names
        its versions on the board before it commits them, so a version the board names may
        not be readable by number yet; this waits until it is."""
        if self.board is not None and self.arena is not None and not committed:
            got, timeout = board_read(self.board, self.arena.view, [(name, None)], None, min_version, timeout,
                                      self.latest_version, self._connected, head_only)
            if got is not None:
                return got[0].version
        header = {"op": "wait_version", "name": name, "min_version": min_version, "timeout": timeout}
        return self._retrying(lambda: self._call(dict(header)))[0]["version"]

    def read_into(self, reads: list[tuple[str, list[tuple[int, int]] | None]], into: CopyInto,
                  version: int | None = None, min_version: int | None = None) -> int | None:
        """``reads`` copied straight from this host's arena into a reader's arrays (``into``):
        the version, or None where the board cannot serve it now (not on the worker's host,
        another version or layout, a version replaced under the copy). After None the arrays
        may hold part of a version: read a whole one the usual way. Never waits: a version
        below ``min_version`` is a None."""
        if self.board is None or self.arena is None:
            return None
        try:
            got, _ = board_read(self.board, self.arena.view, reads, version, min_version, 0.0,
                                self.latest_version, self._connected, into)
        except StoreTimeout:
            return None
        if got is None:
            return None
        self.board_reads += 1
        self.board_bytes_read += got[1]
        return got[0].version

    def version_list(self, prefix: str = "") -> dict[str, list[dict[str, Any]]]:
        """Versioned names starting with ``prefix`` whose versions this worker holds:
        name -> ``[{"version", "tier", "size"}, ...]``, oldest first (on a mesh, ask each
        member: a version's bytes live where it was published or read)."""
        return self._retrying(lambda: self._call({"op": "version_list", "prefix": prefix}))[0]["names"]

