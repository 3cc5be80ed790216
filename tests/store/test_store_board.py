"""The version board: small versions read from shared memory, never a torn or freed copy."""

from __future__ import annotations

import threading
import time

import pytest

from kilorl.store import StoreError, StoreTimeout
from kilorl.store.client.board_reads import MAX_COPY
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
    reader = w.client()
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
