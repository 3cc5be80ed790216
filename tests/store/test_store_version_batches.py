"""Batched versioned reads and writes: several names at one version in one request
(``get_versions``), pipelined publishes that stop at their first failure (``publish_many``).

These are what a parameter sync is built on: a wait whose wake-up carries the version's
bytes, and a publish whose commit record is only there when every part before it is.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from store_helpers import wait_until

from kilorl.store import InvalidRequest, StoreTimeout, VersionGone
from kilorl.store.errors import BatchAborted

BIG = 256 * 1024  # above the client's 64 KiB inline threshold: through the arena


def blob(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def publish_parts(client, v: int, sizes=(1000, BIG)) -> list[bytes]:
    parts = [blob(v * 10 + i, n) for i, n in enumerate(sizes)]
    client.publish_many([(f"part/{i}", p, v) for i, p in enumerate(parts)] + [("anchor", f"v{v}".encode(), v)])
    return parts


def test_one_request_reads_several_names_at_the_anchors_version_whole_and_by_range(client):
    publish_parts(client, 1)
    parts = publish_parts(client, 2)
    v, (anchor, small, ranges) = client.get_versions(
        [("anchor", None), ("part/0", None), ("part/1", [(0, 10), (BIG - 100_000, 100_000)])])
    assert v == 2 and bytes(anchor) == b"v2" and bytes(small) == parts[0]
    assert [bytes(r) for r in ranges] == [parts[1][:10], parts[1][BIG - 100_000:]]
    old = client.get_versions([("anchor", None), ("part/0", None)], version=1)
    assert old.version == 1 and bytes(old.value[1]) == blob(10, 1000)


def test_a_wait_for_a_version_returns_that_versions_parts_with_the_wake_up(client, worker):
    publish_parts(client, 1)
    got: list = []
    reader = worker.client()
    t = threading.Thread(target=lambda: got.append(
        reader.get_versions([("anchor", None), ("part/1", [(5, 20)])], min_version=2, timeout=30)))
    t.start()
    wait_until(lambda: client.stats()["clients"] >= 2, what="reader connected")
    t.join(0.3)
    assert t.is_alive() and not got  # version 1 does not satisfy min_version 2
    parts = publish_parts(client, 2)
    t.join(30)
    (v, (anchor, (rng,))), = got
    assert v == 2 and bytes(anchor) == b"v2" and bytes(rng) == parts[1][5:25]
    with pytest.raises(StoreTimeout):
        reader.get_versions([("anchor", None)], min_version=9, timeout=0.2)
    reader.close()


def test_a_name_missing_at_the_version_is_version_gone_naming_it(client):
    publish_parts(client, 1)
    client.publish("anchor", b"v2", version=2)  # an anchor without parts at 2
    with pytest.raises(VersionGone, match="part/0"):
        client.get_versions([("anchor", None), ("part/0", None)], version=2)
    with pytest.raises(VersionGone):
        client.get_versions([("never", None)])


def test_malformed_reads_are_refused_naming_the_field_and_the_connection_stays(client):
    publish_parts(client, 1)
    for reads, field in [([], "reads"), ([["anchor"]], r"reads\[0\]"), ([["anchor", [[0]]]], r"reads\[0\]\.ranges\[0\]"),
                         ([["anchor", "x"]], r"reads\[0\]\.ranges")]:
        with pytest.raises(InvalidRequest, match=field):
            client._call({"op": "get_versions", "reads": reads})
    with pytest.raises(InvalidRequest, match="offset/length"):
        client.get_versions([("anchor", None), ("part/0", [(900, 200)])])
    assert client.get_versions([("anchor", None)]).version == 1


def test_a_published_list_of_byte_chunks_reads_back_as_their_concatenation(client):
    chunks = [blob(1, 100), memoryview(blob(2, BIG)), bytearray(blob(3, 7))]
    client.publish("joined", chunks, version=1)
    client.set("joined-kv", chunks[:1] + chunks[2:])
    assert bytes(client.get_version("joined").value) == b"".join(bytes(c) for c in chunks)
    assert bytes(client.get("joined-kv")) == bytes(chunks[0]) + bytes(chunks[2])
    with pytest.raises(InvalidRequest, match=r"value\[1\]"):
        client.set("bad", [b"x", 3])


def test_a_publish_batch_stops_at_its_first_failure_and_returns_its_arena_space(client):
    client.publish("b", b"x", version=5)
    used = client.stats()["tiers"]["dram"]["used"]
    items = [("a", blob(1, BIG), 1), ("b", blob(2, BIG), 1), ("c", blob(3, BIG), 1), ("d", b"small", 1)]
    with pytest.raises(InvalidRequest, match="not newer"):
        client.publish_many(items)
    assert client.latest_version("a") == 1  # before the failure: published
    assert client.latest_version("c") is None and client.latest_version("d") is None  # after it: skipped
    assert client.stats()["tiers"]["dram"]["used"] == used + BIG  # only a's bytes stayed in the arena
    assert client.publish_many([("c", b"now", 1), ("d", b"too", 1)]) == [1, 1]  # a new batch runs
    assert bytes(client.get_version("d").value) == b"too"


def test_inline_values_publish_in_one_request_that_stops_at_its_first_failure(client):
    client.publish("b", b"x", version=5)
    sent = []
    pipeline = client._pipeline
    client._pipeline = lambda requests: sent.append([h["op"] for h, _ in requests]) or pipeline(requests)
    with pytest.raises(InvalidRequest, match="not newer"):
        client.publish_many([("a", blob(1, 1000), 1), ("b", b"old", 1), ("c", b"late", 1)])
    assert sent == [["publish"]]  # one round trip for the whole batch
    assert client.latest_version("a") == 1 and bytes(client.get_version("a").value) == blob(1, 1000)
    assert client.latest_version("c") is None  # after the failure: not published
    assert client.publish_many([("c", [b"now", b" and"], 1), ("d", b"too", 1)]) == [1, 1]
    assert bytes(client.get_version("c").value) == b"now and"
    assert sent[-1] == ["publish"]


def test_a_request_of_a_failed_batch_is_skipped_with_batch_aborted(client):
    client.publish("b", b"x", version=5)
    replies = client._pipeline([({"op": "set", "ver": ["b", 1], "meta": {"k": "bytes"}, "batch": "t"}, [b"1"]),
                                ({"op": "set", "ver": ["e", 1], "meta": {"k": "bytes"}, "batch": "t"}, [b"2"]),
                                ({"op": "set", "ver": ["e", 1], "meta": {"k": "bytes"}}, [b"3"])])
    assert isinstance(replies[0], InvalidRequest) and isinstance(replies[1], BatchAborted)
    assert replies[2]["version"] == 1 and bytes(client.get_version("e").value) == b"3"


def test_stats_count_the_bytes_this_connection_read(client):
    client.publish("n", blob(1, BIG), version=1)
    before = client.stats()["connection"]["bytes_read"]
    client.get_versions([("n", [(0, 1000), (BIG - 24, 24)])])
    client.get_version("n", ranges=[(10, 10)])
    assert client.stats()["connection"]["bytes_read"] - before == 1000 + 24 + 10


@pytest.mark.timeout(180)
def test_on_a_mesh_a_reader_waits_on_its_worker_and_gets_ranges_of_parts_published_elsewhere(cluster_of):
    """Publish through A; a reader on B waits there and gets only the ranges it asked for."""
    a, b = cluster_of("builtin").start(2)
    ca, cb = a.client(), b.client()
    publish_parts(ca, 1)
    got: list = []
    t = threading.Thread(target=lambda: got.append(
        cb.get_versions([("anchor", None), ("part/1", [(BIG - 64, 64)]), ("part/0", None)], min_version=2,
                        timeout=60)))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got
    parts = publish_parts(ca, 2)
    t.join(60)
    (v, (anchor, (tail,), small)), = got
    assert v == 2 and bytes(anchor) == b"v2" and bytes(tail) == parts[1][-64:] and bytes(small) == parts[0]
    ca.close()
    cb.close()
