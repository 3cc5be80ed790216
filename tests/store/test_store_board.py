"""The version board: small versions read from shared memory, never a torn or freed copy."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kilorl.store import StoreError, StoreTimeout
from kilorl.store.client.board_reads import MAX_COPY, CopyInto
from kilorl.store.local.config import WorkerConfig
from kilorl.store.local.objects import ObjectStore
from kilorl.store.local.versions import version_key
from kilorl.store.server.board import WorkerBoard
from kilorl.store.wire.board import AUTHORITATIVE, RAW, BoardReader, BoardWriter, supported
from kilorl.store.wire.shm import Arena

pytestmark = pytest.mark.skipif(not supported(), reason="the board is Linux x86-64 only; elsewhere requests serve")


def test_a_read_on_the_workers_host_is_served_from_the_board_with_the_published_bytes(client):
    client.publish_many([("m/part", b"p" * 5000, 1), ("m", b"anchor-1", 1)])
    got = client.get_versions([("m", None), ("m/part", [(10, 20), (4990, 10)])])
    assert got.version == 1 and bytes(got.value[0]) == b"anchor-1"
    assert [bytes(b) for b in got.value[1]] == [b"p" * 20, b"p" * 10]
    assert client.board_reads == 1 and client.stats()["connection"]["bytes_read"] == 8 + 30


def test_a_version_larger_than_the_copy_limit_goes_through_a_request(client):
    client.publish("big", b"b" * (MAX_COPY + 1), version=1)
    assert bytes(client.get_versions([("big", None)]).value[0][-3:]) == b"bbb"
    assert client.board_reads == 0


def test_a_board_wait_wakes_when_the_version_is_published(worker):
    reader, writer = worker.client(), worker.client()
    try:
        writer.publish("w", b"one", version=1)
        got: list = []
        t = threading.Thread(target=lambda: got.append(reader.get_versions([("w", None)], min_version=2, timeout=30)))
        t.start()
        t.join(0.3)
        assert t.is_alive() and not got  # version 1 does not satisfy min_version 2
        writer.publish("w", b"two", version=2)
        t.join(30)
        assert got[0].version == 2 and bytes(got[0].value[0]) == b"two" and reader.board_reads == 1
    finally:
        reader.close()
        writer.close()


def test_a_board_wait_that_runs_out_raises_store_timeout(client):
    client.publish("t", b"x", version=1)
    t0 = time.monotonic()
    with pytest.raises(StoreTimeout):
        client.get_versions([("t", None)], min_version=2, timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 5


def test_a_reader_waiting_on_the_board_of_a_killed_worker_gets_an_error_not_a_hang(workers):
    w = workers("--shm-size", "64MiB")
    reader = w.client(reconnect_timeout=1.0)  # the worker is not restarted: give up after 1 s
    reader.publish("k", b"x", version=1)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            reader.get_versions([("k", None)], min_version=2, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    t.join(0.3)
    w.kill9()
    t.join(20)
    assert not t.is_alive() and isinstance(errors[0], (StoreError, OSError))


def test_a_reader_copies_a_named_version_straight_into_its_own_arrays(client):
    data = bytes(range(250)) * 20
    client.publish_many([("m/part", data, 1), ("m", b"record-1", 1)])
    reads = [("m", None), ("m/part", [(10, 20), (4990, 10)])]
    dest = np.zeros(30, np.uint8)
    assert client.read_into(reads, CopyInto(b"record-1", [(1, 10, dest, 0, 20), (1, 4990, dest, 20, 10)])) == 1
    assert bytes(dest) == data[10:30] + data[4990:5000] and client.board_reads == 1
    assert client.stats()["connection"]["bytes_read"] == 30  # the board's bytes; no request read any


def test_a_copy_into_is_refused_for_another_version_or_layout_and_never_waits(client):
    client.publish_many([("m/part", b"p" * 100, 1), ("m", b"record-1", 1)])
    reads = [("m", None), ("m/part", [(0, 100)])]
    dest = np.zeros(100, np.uint8)
    into = CopyInto(b"record-1", [(1, 0, dest, 0, 100)])
    t0 = time.monotonic()
    assert client.read_into(reads, into, min_version=2) is None  # version 1 is all there is
    assert time.monotonic() - t0 < 1
    assert client.read_into(reads, into, version=2) is None
    assert client.read_into(reads, CopyInto(b"record-0", [(1, 0, dest, 0, 100)])) is None  # another commit record
    assert client.read_into(reads, CopyInto(b"record-1", [(1, 50, dest, 0, 100)])) is None  # past the part's end
    assert not dest.any() and client.board_reads == 0


def test_a_version_replaced_during_a_copy_into_is_never_reported_read(worker):
    """A destination that publishes the next version as it is written: the copy it took is
    checked against the slots afterwards and refused, pinned to its version or not."""
    reader, writer = worker.client(), worker.client()
    versions = iter(range(2, 1000))

    def publish(v: int) -> None:
        writer.publish_many([("m/part", bytes([v]) * 100, v), ("m", b"record", v)], on_board=True)

    class Republishing(np.ndarray):
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            publish(next(versions))

    try:
        publish(1)
        reads = [("m", None), ("m/part", [(0, 100)])]
        racing = np.zeros(100, np.uint8).view(Republishing)
        assert reader.read_into(reads, CopyInto(b"record", [(1, 0, racing, 0, 100)]), version=1) is None
        assert reader.read_into(reads, CopyInto(b"record", [(1, 0, racing, 0, 100)]), min_version=1) is None
        assert reader.board_reads == 0
        calm = np.zeros(100, np.uint8)
        newest = next(versions) - 1
        assert reader.read_into(reads, CopyInto(b"record", [(1, 0, calm, 0, 100)]), min_version=1) == newest
        assert bytes(calm) == bytes([newest]) * 100
    finally:
        reader.close()
        writer.close()


def test_a_wait_for_a_version_number_wakes_when_it_is_published_and_runs_out_otherwise(worker):
    reader, writer = worker.client(), worker.client()
    try:
        writer.publish("w", b"one", version=1)
        got: list[int] = []
        t = threading.Thread(target=lambda: got.append(reader.wait_version("w", 2, timeout=30)))
        t.start()
        t.join(0.3)
        assert t.is_alive() and not got
        writer.publish("w", b"two", version=2)
        t.join(30)
        assert got == [2]
        with pytest.raises(StoreTimeout):
            reader.wait_version("w", 3, timeout=0.2)
    finally:
        reader.close()
        writer.close()


def test_a_copy_checked_against_a_slot_rewritten_meanwhile_is_refused():
    writer = BoardWriter.create()
    reader = BoardReader.attach(str(writer.arena.path), writer.arena.size)
    try:
        assert writer.put("p", "key-1", 1, 0, 10, RAW)
        first = reader.entry("p")
        assert first.version == 1 and reader.unchanged("p", first)
        assert writer.put("p", "key-2", 2, 64, 10, RAW)
        assert not reader.unchanged("p", first) and reader.entry("p").version == 2
        assert writer.put("p", "key-1", 1, 0, 10, RAW)  # an older version never replaces a newer
        assert reader.entry("p").version == 2
    finally:
        reader.close()
        writer.close()


def test_a_slot_says_none_before_the_region_it_names_is_freed(tmp_path):
    rc = WorkerConfig(run_dir=str(tmp_path), shm_size="8MiB").resolve()
    arena = Arena.create(rc.shm_bytes)
    store = ObjectStore(rc, arena)
    board = WorkerBoard(store, BoardWriter.create())
    reader = BoardReader.attach(board.path, board.size)
    try:
        key = version_key("n", 1)
        region = store.stage(100)
        obj, _ = store.put(key, {"k": "bytes"}, 100, region, tier=None, ttl=None, l2_mode=None, pin=False)
        board.committed("n", 1, key, obj, authoritative=True)
        named = reader.entry("n")
        assert (named.version, named.offset, named.size) == (1, region.offset, 100)
        assert named.flags == RAW | AUTHORITATIVE
        store.delete([key])
        assert reader.entry("n").version == -1 and not reader.unchanged("n", named)
    finally:
        reader.close()
        board.close()
        arena.close()


def test_a_board_left_behind_by_a_reconnect_serves_nothing(client):
    """A failover (even one inside a board wait's check) moves the client to another worker's
    board; the old one may be a dead worker's, so a read still holding it gets None, not bytes."""
    from kilorl.store.client.board_reads import board_read

    client.publish("r", b"x", version=1)
    old = client.board
    client._connect(client.address)  # what a failover does
    assert old.stale and client.board is not None and client.board is not old
    got, _ = board_read(old, client.arena.view, [("r", None)], None, None, None, client.latest_version,
                        client._connected)
    assert got is None
    assert bytes(client.get_versions([("r", None)]).value[0]) == b"x" and client.board_reads == 1


def test_closing_a_client_twice_is_harmless(worker):
    # a finalizer may close a client its owner closed already (the yuanrong facade does)
    c = worker.client()
    c.publish("r", b"x", version=1)
    assert c.board is not None
    c.close()
    c.close()
    assert c.board.stale
