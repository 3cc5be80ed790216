"""Publishers that name their own versions on the worker's version board (``publish_many(..., on_board=True)``).

The publisher writes a version's bytes into arena regions it holds and names them on the
board. The commit request comes after that. Readers on the host must see every version
whole and exactly as the request path would serve it. The worker must never free a region
the board may still name. A refused, crashed or competing publisher must leave the board
naming only what the worker holds.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from store_helpers import wait_until

from kilorl.store import InvalidRequest

PARTS = ("pol/shard/0", "pol/shard/1", "pol/layout")  # the anchor (the commit record) last, as a parameter store does


def version_parts(v: int) -> list[bytes]:
    rng = np.random.default_rng(v)
    return [rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes(), rng.integers(0, 256, 7_000, dtype=np.uint8).tobytes(),
            f"layout of {v}".encode()]


def publish(client, v: int) -> list[int]:
    return client.publish_many([(name, part, v) for name, part in zip(PARTS, version_parts(v))], on_board=True)


def read(reader, version=None, min_version=None):
    """The anchor and both parts at one version, as a parameter reader asks for them."""
    got = reader.get_versions([("pol/layout", None), ("pol/shard/0", None), ("pol/shard/1", [(0, 7_000)])],
                              version=version, min_version=min_version, timeout=10)
    anchor, shard0, (shard1,) = got.value
    return got.version, [bytes(shard0), bytes(shard1), bytes(anchor)]


def test_a_version_named_on_the_board_is_read_from_it_and_committed_in_the_worker(worker):
    writer, reader, remote = worker.client(), worker.client(), worker.client(zero_copy=False)
    for v in range(1, 6):
        assert publish(writer, v) == [v, v, v]
        assert read(reader, min_version=v) == (v, version_parts(v))
    assert reader.board_reads == 5  # every read came from the board, none needed a request
    assert writer.latest_version("pol/layout") == 5
    assert read(remote, version=5) == (5, version_parts(5))  # the worker holds what the board named
    for c in (writer, reader, remote):
        c.close()


def test_readers_racing_a_fast_publisher_only_ever_see_whole_versions(workers):
    worker = workers("--shm-size", "64MiB", "--keep-versions", "1")  # the tightest reclaim: one version kept
    writer = worker.client()
    publish(writer, 1)
    last = 200
    seen: dict[int, list[int]] = {0: [], 1: []}
    errors: list[str] = []

    def keep_reading(rank: int) -> None:
        reader = worker.client()
        v = 0
        while v < last:
            v, parts = read(reader, min_version=v + 1)
            if parts != version_parts(v):
                errors.append(f"reader {rank}: version {v} read torn or from reused memory")
            seen[rank].append(v)
        reader.close()

    threads = [threading.Thread(target=keep_reading, args=(rank,)) for rank in seen]
    for t in threads:
        t.start()
    for v in range(2, last + 1):
        publish(writer, v)
    for t in threads:
        t.join(30)
    assert errors == []
    for rank, versions in seen.items():
        assert versions == sorted(set(versions)) and versions[-1] == last, rank  # each read newer than the last
    writer.close()


def test_a_reader_waiting_for_a_part_that_is_not_the_anchor_is_woken_by_the_publish(worker, monkeypatch):
    # A publish names every part, then wakes all their waiters in one call. The board's fallback
    # poll and the read's timeout are both far longer than the join: only a wake-up ends the wait.
    import kilorl.store.client.board_reads as board_reads

    monkeypatch.setattr(board_reads, "CHECK_S", 300.0)
    writer, reader = worker.client(), worker.client()
    publish(writer, 1)
    assert reader.get_versions([("pol/shard/0", None)], min_version=1, timeout=10).version == 1  # finds the slot
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(
        reader.get_versions([("pol/shard/0", None)], min_version=2, timeout=300)), daemon=True)
    waiting.start()
    wait_until(lambda: waiting.is_alive(), what="the reader waits")
    publish(writer, 2)
    waiting.join(20)
    assert not waiting.is_alive() and got[0].version == 2
    assert bytes(got[0].value[0]) == version_parts(2)[0]
    assert reader.board_reads == 2  # both answered from the board, the second by its wake-up
    writer.close()
    reader.close()


def test_the_worker_keeps_at_most_about_one_version_held_per_name_and_none_once_the_publisher_leaves(worker):
    writer, other = worker.client(), worker.client()
    for v in range(1, 50):
        publish(writer, v)
    one_version = sum(len(p) for p in version_parts(49))
    held = other.stats()["board_held_bytes"]
    assert one_version <= held <= 2 * one_version
    writer.close()
    wait_until(lambda: other.stats()["board_held_bytes"] == 0, what="holds ended with the publisher's connection")
    other.close()


def test_a_second_publisher_of_the_same_names_publishes_by_request_and_readers_still_get_its_versions(worker):
    first, second, reader = worker.client(), worker.client(), worker.client()
    publish(first, 1)
    assert publish(second, 2) == [2, 2, 2]  # its claim is refused: the request path, same result
    assert read(reader, min_version=2) == (2, version_parts(2))
    first.close()  # the board is the worker's again: it names the next version itself
    wait_until(lambda: second.stats()["clients"] == 2, what="first publisher gone")
    before = reader.board_reads
    publish(second, 3)
    assert read(reader, min_version=3) == (3, version_parts(3)) and reader.board_reads == before + 1
    for c in (second, reader):
        c.close()


def test_a_refused_publish_is_withdrawn_from_the_board_and_raised(worker):
    writer, reader = worker.client(), worker.client()
    publish(writer, 5)
    with pytest.raises(InvalidRequest, match="version"):
        publish(writer, 3)  # not newer than 5
    assert read(reader, min_version=1) == (5, version_parts(5))
    assert publish(writer, 6) == [6, 6, 6]  # the publisher goes on: its regions came back
    assert read(reader, min_version=6) == (6, version_parts(6))
    for c in (writer, reader):
        c.close()


def test_a_publisher_that_dies_after_naming_leaves_no_slot_naming_freed_memory(worker):
    writer, reader = worker.client(), worker.client()
    publish(writer, 1)
    writer._fs.close()  # the connection drops as if the process died, with version 1 named by it
    wait_until(lambda: reader.stats()["board_held_bytes"] == 0, what="the dead publisher's holds ended")
    before = reader.board_reads
    assert read(reader, min_version=1) == (1, version_parts(1))  # still there, through the request
    assert reader.board_reads == before  # the slot was cleared, not left naming freed regions
    other = worker.client()
    publish(other, 2)  # claims the names anew
    assert read(reader, min_version=2) == (2, version_parts(2)) and reader.board_reads == before + 1
    for c in (reader, other):
        c.close()


def test_malformed_board_publishes_are_refused_naming_the_field_and_the_connection_stays_usable(client):
    for header, needle in [
        ({"op": "board_claim", "names": []}, "names"),
        ({"op": "board_claim", "names": ["ok", ""]}, "names"),
        ({"op": "publish_staged", "items": [["pol", 1, {}, 999]]}, "unknown allocation"),
        ({"op": "publish_staged", "items": [["pol", 1, {}]]}, r"items\[0\]"),
        ({"op": "publish_staged", "items": "nope"}, "items"),
    ]:
        with pytest.raises(InvalidRequest, match=needle):
            client._call(header)
    ticket = client._call({"op": "alloc", "size": 8})[0]["ticket"]
    with pytest.raises(InvalidRequest, match="names its version"):
        client._call({"op": "publish_staged", "items": [["pol", None, {}, ticket]]})
    with pytest.raises(InvalidRequest, match="named twice"):
        client._call({"op": "publish_staged", "items": [["a", 1, {}, ticket], ["b", 1, {}, ticket]]})
    assert client.ping()


def test_a_named_version_demoted_out_of_the_arena_keeps_its_bytes_until_the_board_moves_on(workers, tmp_path):
    # A small arena over a disk tier: filling it demotes the named version's objects to disk.
    # Their arena regions stay allocated while the publisher's slots name them, so a reader's
    # copy from the board is never of memory that the fill reused.
    worker = workers("--shm-size", "1MiB", "--disk-dir", str(tmp_path / "disk"), "--disk-size", "64MiB",
                     "--high-watermark", "0.5", "--low-watermark", "0.3")
    writer, reader = worker.client(), worker.client()
    publish(writer, 1)
    for i in range(60):  # past the high watermark: the oldest objects go to disk, and fills reuse their room
        writer.set(f"fill/{i}", bytes([i + 1]) * 20_000)
    before = reader.board_reads
    assert read(reader, min_version=1) == (1, version_parts(1))
    assert reader.board_reads == before + 1  # read from the board, from the held regions
    assert writer.stats()["board_held_bytes"] >= sum(len(p) for p in version_parts(1))  # held, though demoted
    for c in (writer, reader):
        c.close()
