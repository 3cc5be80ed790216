"""Pipelined batches of publishes: every request sent, then every reply read.

A batch carries one ``batch`` id; the worker skips the requests of a batch after its first
failure (``BatchAborted``), so what is published is always a prefix of the batch. Values
that go through the arena take one more round trip (all allocations at once).
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
