"""Batches of publishes: one request when every value travels inline, else pipelined.

Values small enough to travel inline go in one ``publish`` request (one frame, one reply).
With values that go through the arena, every request is sent, then every reply read: a
batch carries one ``batch`` id and the worker skips the requests of a batch after its first
failure (``BatchAborted``); the arena's values take one more round trip (all allocations at
once). Either way what is published is always a prefix of the batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from kilorl.store.errors import StoreError
from kilorl.store.wire import codec

_BATCH_IDS = itertools.count(1)


Pipeline = Callable[[list[tuple[dict[str, Any], list[Any]]]], list[dict[str, Any] | StoreError]]
"""Sends requests back to back and returns each reply header, or the error it carried."""


def publish_batch(pipeline: Pipeline, check_size: Callable[[int], None], arena: Any, inline_threshold: int,
                  items: list[tuple[str, Any, int | None]], mode: str) -> list[int]:
    """``StoreClient.publish_many`` on one connection (the caller retries on failover).

    ``arena``: the worker's mapped arena (values of ``inline_threshold`` bytes and more are
    written straight into it), or None (every value inline)."""
    batch = next(_BATCH_IDS)
    encoded = [codec.encode(value) for _, value, _ in items]
    for enc in encoded:
        check_size(enc.nbytes)
    big = [i for i, enc in enumerate(encoded) if arena is not None and enc.nbytes >= inline_threshold]
    if not big:  # every value inline: one request carries them all
        return _publish_inline(pipeline, items, encoded, mode)
    tickets: dict[int, int] = {}
    if big:  # one round trip for every arena allocation, then the bytes go straight in
        replies = pipeline([({"op": "alloc", "size": encoded[i].nbytes}, []) for i in big])
        failed = next((r for r in replies if isinstance(r, StoreError)), None)
        tickets = {i: r["ticket"] for i, r in zip(big, replies) if not isinstance(r, StoreError)}
        try:
            if failed is not None:
                raise failed
            for i, r in zip(big, replies):
                encoded[i].write_into(arena.view[r["offset"]:r["offset"] + encoded[i].nbytes])
        except BaseException:
            pipeline([({"op": "abort", "ticket": t}, []) for t in tickets.values()])
            raise
    requests = []
    for i, ((name, _, version), enc) in enumerate(zip(items, encoded)):
        fields = {"ver": [name, version], "mode": mode, "meta": enc.meta, "batch": batch}
        if i in tickets:
            requests.append(({"op": "commit", "ticket": tickets[i], **fields}, []))
        else:
            requests.append(({"op": "set", **fields}, enc.buffers()))
    replies = pipeline(requests)
    errors = [r for r in replies if isinstance(r, StoreError)]
    if errors:
        skipped = [tickets[i] for i, r in enumerate(replies) if isinstance(r, StoreError) and i in tickets]
        pipeline([({"op": "abort", "ticket": t}, []) for t in skipped])
        raise errors[0]
    return [r["version"] for r in replies]


def _publish_inline(pipeline: Pipeline, items: list[tuple[str, Any, int | None]], encoded: list[Any],
                    mode: str) -> list[int]:
    """The worker's ``publish`` op: every value end to end in one frame, stored in order up to
    the first failure (whose error is raised), as a pipelined batch would be."""
    header = {"op": "publish", "mode": mode,
              "items": [[name, version, enc.meta, enc.nbytes] for (name, _, version), enc in zip(items, encoded)]}
    reply = pipeline([(header, [b for enc in encoded for b in enc.buffers()])])[0]
    if isinstance(reply, StoreError):
        raise reply
    return reply["versions"]
