"""Streams: bounded message logs with consumer groups and at-least-once delivery.

Every group sees every message; within a group each message goes to one consumer and
stays pending until acked. Pending messages return to the group when their consumer's
connection closes (the consumer died) or after ``ack_timeout_s``. A message is dropped
once every group has acked it; a stream holding ``capacity`` messages makes producers
wait (back-pressure). A group created later starts at the oldest retained message, so
nothing sent before the first consumer arrived is lost.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kilorl.store.errors import InvalidRequest, StoreTimeout


@dataclass
class Message:
    id: int
    meta: dict[str, Any]
    payload: bytes
    deliveries: int = 0


@dataclass
class Group:
    cursor: int
    pending: dict[int, tuple[int, float]] = field(default_factory=dict)  # id -> (conn, deadline)
    redeliver: collections.deque = field(default_factory=collections.deque)
    done: set[int] = field(default_factory=set)


@dataclass
class Stream:
    capacity: int
    next_id: int = 1
    messages: collections.OrderedDict[int, Message] = field(default_factory=collections.OrderedDict)
    groups: dict[str, Group] = field(default_factory=dict)


class StreamTable:
    """All streams of a worker behind one condition variable."""

    def __init__(self, default_capacity: int, ack_timeout_s: float):
        self.default_capacity = default_capacity
        self.ack_timeout_s = ack_timeout_s
        self.cond = threading.Condition()
        self.streams: dict[str, Stream] = {}

    def _stream(self, name: str, capacity: int | None = None) -> Stream:
        if not isinstance(name, str) or not name:
            raise InvalidRequest("stream: must be a non-empty string")
        s = self.streams.get(name)
        if s is None:
            cap = capacity or self.default_capacity
            if cap < 1:
                raise InvalidRequest(f"capacity: must be >= 1, got {cap}")
            s = self.streams[name] = Stream(cap)
        return s

    def send(self, name: str, meta: dict[str, Any], payload: bytes, timeout: float | None,
             capacity: int | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            s = self._stream(name, capacity)
            while len(s.messages) >= s.capacity:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise StoreTimeout(f"stream {name!r} is full ({s.capacity} unacked messages); "
                                       f"no room within {timeout}s")
                self.cond.wait(remaining if remaining is not None else 1.0)
            mid = s.next_id
            s.next_id += 1
            s.messages[mid] = Message(mid, meta, payload)
            self.cond.notify_all()
            return mid

    def _group(self, s: Stream, group: str) -> Group:
        if not isinstance(group, str) or not group:
            raise InvalidRequest("group: must be a non-empty string")
        g = s.groups.get(group)
        if g is None:
            first = next(iter(s.messages), s.next_id)
            g = s.groups[group] = Group(cursor=first)
        return g

    def _requeue_expired(self, g: Group, now: float) -> None:
        for mid, (_conn, deadline) in list(g.pending.items()):
            if deadline <= now:
                del g.pending[mid]
                g.redeliver.append(mid)

    def receive(self, name: str, group: str, conn_id: int, timeout: float | None) -> Message | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            s = self._stream(name)
            g = self._group(s, group)
            while True:
                now = time.monotonic()
                self._requeue_expired(g, now)
                msg = None
                while g.redeliver and msg is None:
                    mid = g.redeliver.popleft()
                    if mid in s.messages and mid not in g.done:
                        msg = s.messages[mid]
                while msg is None and g.cursor < s.next_id:
                    mid, g.cursor = g.cursor, g.cursor + 1
                    msg = s.messages.get(mid)
                if msg is not None:
                    g.pending[msg.id] = (conn_id, now + self.ack_timeout_s)
                    msg.deliveries += 1
                    return msg
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    return None
                wait = min(remaining if remaining is not None else 1.0, 1.0)
                self.cond.wait(wait)

    def ack(self, name: str, group: str, ids: list[int]) -> int:
        with self.cond:
            s = self._stream(name)
            g = self._group(s, group)
            n = 0
            for mid in ids:
                if g.pending.pop(mid, None) is not None or (mid in s.messages and mid not in g.done):
                    g.done.add(mid)
                    n += 1
            self._trim(s)
            self.cond.notify_all()
            return n

    def _trim(self, s: Stream) -> None:
        if not s.groups:
            return
        while s.messages:
            mid = next(iter(s.messages))
            if not all(mid in g.done for g in s.groups.values()):
                break
            del s.messages[mid]
            for g in s.groups.values():
                g.done.discard(mid)

    def connection_closed(self, conn_id: int) -> None:
        """Returns the pending messages of a dead consumer to its groups at once."""
        with self.cond:
            for s in self.streams.values():
                for g in s.groups.values():
                    for mid, (owner, _) in list(g.pending.items()):
                        if owner == conn_id:
                            del g.pending[mid]
                            g.redeliver.appendleft(mid)
            self.cond.notify_all()

    def info(self, name: str) -> dict[str, Any]:
        with self.cond:
            s = self.streams.get(name)
            if s is None:
                return {"exists": False}
            return {"exists": True, "capacity": s.capacity, "retained": len(s.messages), "next_id": s.next_id,
                    "groups": {n: {"pending": len(g.pending), "cursor": g.cursor} for n, g in s.groups.items()}}
