"""``StreamClient``: openYuanrong streams on kiloRL streams.

A subscription name is a kiloRL consumer group (each subscription sees every element;
consumers sharing a name share its elements). openYuanrong delivers to a subscription
only what is sent after it subscribed, except that the first ``retain_for_num_consumers``
subscriptions also get what was sent before them: subscribing marks the stream (a marker
element that consumers skip) and elements older than the mark are skipped. Producer and
consumer counts, the retain setting and the stream's generation are small records in the
store; ``delete_stream`` starts a new generation (the old kiloRL stream's elements stay
in the worker until it restarts: kiloRL has no stream-delete op yet).
"""

from __future__ import annotations

import enum
import time
import weakref
from typing import Any

from kilorl.store.client import StoreClient
from kilorl.store.yuanrong._base import Connected
from kilorl.store.yuanrong._refs import PREFIX, add_floored
from kilorl.store.yuanrong.errors import DsRuntimeError, DsTypeError, DsUnsupported, invalid, translated
from kilorl.store.yuanrong.util import Validator

_MARKER = "\x00yr-subscribe"  # a str element: producers of this layer only send bytes
_BYTES_PER_ELEMENT = 64  # kiloRL bounds a stream in elements: max_stream_size_byte / this


class SubconfigType(enum.Enum):
    """Subscription types; STREAM and ROUND_ROBIN map onto consumer groups."""

    STREAM = 0
    ROUND_ROBIN = 1
    KEY_PARTITIONS = 2


def _read_int(store: StoreClient, key: str) -> int:
    value = store.mget([key])[0]
    return max(0, int(bytes(value).decode())) if value is not None else 0


def _add(store: StoreClient, key: str, delta: int) -> int:
    """Atomic in the worker (``StoreClient.incr``), never below zero."""
    return add_floored(store, key, delta)[1]


class _Records:
    """The records of one stream name (generation, counts, settings)."""

    def __init__(self, store: StoreClient, name: str):
        self.store, self.name = store, name
        self.gen = _read_int(store, f"{PREFIX}stream/{name}/gen")
        self.base = f"{PREFIX}stream/{name}/{self.gen}/"
        self.physical = f"{PREFIX}{name}#{self.gen}"

    def capacity(self) -> int:
        return _read_int(self.store, self.base + "cap") or (1024**3) // _BYTES_PER_ELEMENT


class Element(bytes):
    """A received element: its bytes (buffer protocol) and ``get_id()``."""

    _id: int

    def get_id(self) -> int:
        return self._id


def _element(data: Any, element_id: int) -> Element:
    e = Element(bytes(data))
    e._id = element_id
    return e


class Producer:
    """Sends elements (bytes-like) to a stream."""

    def __init__(self, records: _Records, capacity: int):
        self._records = records
        self._native = records.store.producer(records.physical, capacity)
        self._closed = False

    def send(self, element_bytes: bytes | bytearray | memoryview, timeout_ms: int | None = None) -> None:
        if not isinstance(element_bytes, (memoryview, bytes, bytearray)):
            raise DsTypeError("The input of parament should be memoryview or bytes or bytearray.")
        timeout = None
        if timeout_ms is not None:
            if type(timeout_ms) is not int:
                raise DsTypeError("The input of timeout_ms should be int.")
            Validator.check_param_range("timeout_ms", timeout_ms, 0, Validator.INT32_MAX_SIZE)
            timeout = timeout_ms / 1000
        if self._closed:
            raise DsRuntimeError("code: [K_SC_ALREADY_CLOSED], msg: [the producer is closed]")
        with translated():
            self._native.send(element_bytes if isinstance(element_bytes, bytes) else bytes(element_bytes),
                              timeout=timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        r = self._records
        with translated():
            _add(r.store, f"{r.base}producers/{r.store.address}", -1)


class Consumer:
    """Receives the elements of one subscription."""

    def __init__(self, records: _Records, sub_name: str, start_id: int, connection: StoreClient):
        self._records, self._start = records, start_id
        self._connection = connection  # its own: a blocking receive must not stall producers
        self._native = connection.consumer(records.physical, sub_name)
        self._closed = False
        weakref.finalize(self, connection.close)

    def _next(self, timeout_s: float) -> Element | None:
        while True:
            with translated():
                msg = self._native.receive(timeout=max(0.0, timeout_s))
            if msg is None:
                return None
            if isinstance(msg.value, str) or msg.id < self._start:  # a mark, or sent before we subscribed
                with translated():
                    self._native.ack(msg.id)
                continue
            return _element(msg.value, msg.id)

    def _check(self, timeout_ms: int) -> float:
        if type(timeout_ms) is not int:
            raise DsTypeError("The input of timeout_ms should be int.")
        Validator.check_param_range("timeout_ms", timeout_ms, 0, Validator.INT32_MAX_SIZE)
        if self._closed:
            raise DsRuntimeError("code: [K_SC_ALREADY_CLOSED], msg: [the consumer is closed]")
        return time.monotonic() + timeout_ms / 1000

    def receive(self, expect_num: int, timeout_ms: int) -> list[Element]:
        """Up to ``expect_num`` elements, waiting at most ``timeout_ms`` for them."""
        if type(expect_num) is not int:
            raise DsTypeError("The input of expect_num should be int.")
        Validator.check_param_range("expect_num", expect_num, 1, Validator.INT32_MAX_SIZE)
        deadline = self._check(timeout_ms)
        out: list[Element] = []
        while len(out) < expect_num:
            e = self._next(deadline - time.monotonic())
            if e is None:
                break
            out.append(e)
        return out

    def receive_any(self, timeout_ms: int) -> list[Element]:
        """Whatever is available, waiting at most ``timeout_ms`` for the first element."""
        deadline = self._check(timeout_ms)
        first = self._next(deadline - time.monotonic())
        if first is None:
            return []
        out = [first]
        while (e := self._next(0.0)) is not None:
            out.append(e)
        return out

    def ack(self, element_id: int) -> None:
        if type(element_id) is not int:
            raise DsTypeError("The input of element_id should be int.")
        with translated():
            self._native.ack(element_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with translated():
            _add(self._records.store, self._records.base + "consumers", -1)
        self._connection.close()


class StreamClient(Connected):
    """openYuanrong's stream client."""

    def __init__(self, host: str, port: int, client_public_key: str = "", client_private_key: str = "",
                 server_public_key: str = "", access_key: str = "", secret_key: str = "", token: str = "",
                 tenant_id: str = "", enable_exclusive_connection: bool = False):
        token = token.decode() if isinstance(token, bytes) else token
        super().__init__(host, port, 60000, token)

    def _records(self, stream_name: Any) -> _Records:
        if not isinstance(stream_name, str):
            raise DsTypeError("The input of stream_name should be string.")
        if not stream_name:
            raise invalid("stream_name: must not be empty")
        with translated():
            return _Records(self.store, stream_name)

    def create_producer(self, stream_name: str, delay_flush_time_ms: int = 5, page_size_byte: int = 1024 * 1024,
                        max_stream_size_byte: int = 1024 * 1024 * 1024, auto_cleanup: bool = False,
                        retain_for_num_consumers: int = 0, encrypt_stream: bool = False,
                        reserve_size: int = 0) -> Producer:
        """A producer; sends are immediate here (``delay_flush_time_ms`` is accepted, unused)."""
        if not isinstance(stream_name, str):
            raise DsTypeError("The input of stream_name should be string.")
        for name, value in (("delay_flush_time_ms", delay_flush_time_ms), ("page_size_byte", page_size_byte),
                            ("max_stream_size_byte", max_stream_size_byte),
                            ("retain_for_num_consumers", retain_for_num_consumers), ("reserve_size", reserve_size)):
            if type(value) is not int:
                raise DsTypeError(f"The input of {name} should be int.")
        Validator.check_args_types([["auto_cleanup", auto_cleanup, bool], ["encrypt_stream", encrypt_stream, bool]])
        Validator.check_param_range("delay_flush_time_ms", delay_flush_time_ms, 0, Validator.INT32_MAX_SIZE)
        Validator.check_param_range("page_size_byte", page_size_byte, 1, max(1, max_stream_size_byte))
        Validator.check_param_range("max_stream_size_byte", max_stream_size_byte, 1, Validator.UINT64_MAX_SIZE)
        Validator.check_param_range("retain_for_num_consumers", retain_for_num_consumers, 0, Validator.INT32_MAX_SIZE)
        if reserve_size and (reserve_size > max_stream_size_byte or reserve_size % page_size_byte):
            raise invalid(f"reserve_size: {reserve_size} must be a multiple of page_size_byte ({page_size_byte}) "
                          f"and at most max_stream_size_byte ({max_stream_size_byte})")
        r = self._records(stream_name)
        capacity = max(1, max_stream_size_byte // _BYTES_PER_ELEMENT)
        with translated():
            if not _read_int(r.store, r.base + "cap"):
                r.store.set(r.base + "cap", str(capacity).encode())
            if retain_for_num_consumers > _read_int(r.store, r.base + "retain"):
                r.store.set(r.base + "retain", str(retain_for_num_consumers).encode())
            _add(r.store, f"{r.base}producers/{r.store.address}", 1)
        return Producer(r, r.capacity())

    def subscribe(self, stream_name: str, sub_name: str, subscription_type: int) -> Consumer:
        """A consumer of subscription ``sub_name`` (``SubconfigType.X.value``)."""
        if type(subscription_type) is not int:
            raise DsTypeError("The input of type should be int.")
        Validator.check_args_types([["sub_name", sub_name, str]])
        if subscription_type == SubconfigType.KEY_PARTITIONS.value:
            raise DsUnsupported("subscription_type: KEY_PARTITIONS is not supported (STREAM and ROUND_ROBIN are)")
        if subscription_type not in (SubconfigType.STREAM.value, SubconfigType.ROUND_ROBIN.value):
            raise invalid(f"subscription_type: unknown value {subscription_type}")
        r = self._records(stream_name)
        with translated():
            subs = _add(r.store, r.base + "subs", 1)
            _add(r.store, r.base + "consumers", 1)
            start = 0
            if subs > _read_int(r.store, r.base + "retain"):
                start = r.store.producer(r.physical, r.capacity()).send(_MARKER)
        return Consumer(r, sub_name, start, self._open_extra())

    def delete_stream(self, stream_name: str) -> None:
        """Retires the stream; refused while producers or consumers of it are open."""
        r = self._records(stream_name)
        if self.query_global_producer_num(stream_name) or self.query_global_consumer_num(stream_name):
            raise DsRuntimeError(f"code: [K_SC_STREAM_IN_USE], msg: [stream {stream_name!r} still has open "
                                 "producers or consumers]")
        with translated():
            stale = r.store.keys(r.base)
            if stale:
                r.store.delete(*stale)
            r.store.incr(f"{PREFIX}stream/{stream_name}/gen", 1)

    def query_global_producer_num(self, stream_name: str) -> int:
        """Workers with at least one open producer of the stream (openYuanrong counts per node)."""
        r = self._records(stream_name)
        with translated():
            keys = r.store.keys(r.base + "producers/")
            return sum(1 for k in keys if _read_int(r.store, k) > 0)

    def query_global_consumer_num(self, stream_name: str) -> int:
        r = self._records(stream_name)
        with translated():
            return _read_int(r.store, r.base + "consumers")
