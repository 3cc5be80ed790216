"""Stream producers and consumers of a ``StoreClient`` (they share its connection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from kilorl.store.wire import codec as serialization

Call = Callable[..., tuple[dict[str, Any], "memoryview | None"]]
"""``call(header, buffers=()) -> (reply header, payload)``: the client's request function."""


class StreamMessage(NamedTuple):
    id: int
    value: Any
    deliveries: int


class Producer:
    """Sends messages to a stream; ``send`` blocks while the stream is full."""

    def __init__(self, call: Call, check_size: Callable[[int], None], stream: str, capacity: int | None):
        self._request, self._check_size = call, check_size
        self.stream, self.capacity = stream, capacity

    def send(self, value: Any, timeout: float | None = None) -> int:
        enc = serialization.encode(value)
        self._check_size(enc.nbytes)
        resp, _ = self._request({"op": "xsend", "stream": self.stream, "meta": enc.meta, "timeout": timeout,
                                 "capacity": self.capacity}, enc.buffers())
        return resp["id"]


class Consumer:
    """Receives from a stream within a consumer group; unacked messages are redelivered."""

    def __init__(self, call: Call, stream: str, group: str):
        self._request = call
        self.stream, self.group = stream, group

    def receive(self, timeout: float | None = None) -> StreamMessage | None:
        resp, payload = self._request({"op": "xrecv", "stream": self.stream, "group": self.group,
                                       "timeout": timeout})
        if resp["id"] is None:
            return None
        value = serialization.decode(resp["meta"], payload if payload is not None else memoryview(b""))
        return StreamMessage(resp["id"], value, resp["deliveries"])

    def ack(self, *ids: int) -> int:
        return self._request({"op": "xack", "stream": self.stream, "group": self.group, "ids": list(ids)})[0]["n"]
