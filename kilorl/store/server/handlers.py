"""The worker's op table: every request type a worker alone serves, one function per op.

A handler gets the worker, the connection and the request header; it reads the payload
itself when it needs one (straight into the arena for sets) and returns a ``Reply``.
Layers above add new ops with ``Worker.register``; they never wrap these: the handlers
call the worker's router (``router.py``) at fixed points instead.
"""

from __future__ import annotations

from kilorl.store.server import admin, counters, reads, staged, streams, versions, writes
from kilorl.store.server.request import Handler

HANDLERS: dict[str, Handler] = {**writes.OPS, **counters.OPS, **reads.OPS, **admin.OPS, **versions.OPS, **streams.OPS,
                               **staged.OPS}
