"""StreamClient against a real worker: subscriptions, receive semantics, counts, delete."""

from __future__ import annotations

import threading
import time

import pytest

from kilorl.store import InvalidRequest
from kilorl.store.yuanrong import StreamClient, SubconfigType

STREAM = SubconfigType.STREAM.value


def test_elements_sent_after_subscribing_arrive_in_order_with_increasing_ids(connect):
    sc = connect(StreamClient)
    producer = sc.create_producer("s1")
    consumer = sc.subscribe("s1", "sub", STREAM)
    for i in range(5):
        producer.send(f"e{i}".encode())
    got = consumer.receive(5, 0)
    assert [bytes(e) for e in got] == [f"e{i}".encode() for i in range(5)]
    assert [memoryview(e).tobytes() for e in got][0] == b"e0"
    ids = [e.get_id() for e in got]
    assert ids == sorted(ids) and len(set(ids)) == 5
    for i in ids:
        consumer.ack(i)


def test_receive_returns_fewer_than_expected_after_the_timeout(connect):
    sc = connect(StreamClient)
    producer = sc.create_producer("s2")
    consumer = sc.subscribe("s2", "sub", STREAM)
    producer.send(b"only")
    t0 = time.monotonic()
    got = consumer.receive(3, 300)
    assert [bytes(e) for e in got] == [b"only"] and 0.25 < time.monotonic() - t0 < 3
    threading.Timer(0.2, lambda: producer.send(b"later")).start()
    assert [bytes(e) for e in consumer.receive_any(3000)] == [b"later"]
    assert consumer.receive_any(0) == []


def test_each_subscription_sees_every_element_and_round_robin_consumers_share(connect):
    sc = connect(StreamClient)
    producer = sc.create_producer("s3")
    a, b = sc.subscribe("s3", "A", STREAM), sc.subscribe("s3", "B", STREAM)
    rr1 = sc.subscribe("s3", "RR", SubconfigType.ROUND_ROBIN.value)
    rr2 = sc.subscribe("s3", "RR", SubconfigType.ROUND_ROBIN.value)
    for i in range(4):
        producer.send(bytes([i]))
    assert len(a.receive(4, 100)) == 4 and len(b.receive(4, 100)) == 4
    shared = rr1.receive(2, 100) + rr2.receive(2, 100)
    assert sorted(bytes(e) for e in shared) == [bytes([i]) for i in range(4)]
    with pytest.raises(RuntimeError, match="KEY_PARTITIONS"):
        sc.subscribe("s3", "K", SubconfigType.KEY_PARTITIONS.value)


def test_elements_sent_before_a_subscription_are_kept_only_for_retained_consumers(connect):
    sc = connect(StreamClient)
    plain = sc.create_producer("s4")
    plain.send(b"before")
    assert sc.subscribe("s4", "late", STREAM).receive_any(0) == []
    retained = sc.create_producer("s5", 5, 1024 * 1024, 10 * 1024 * 1024, False, 1)
    retained.send(b"kept")
    first = sc.subscribe("s5", "first", STREAM)
    assert [bytes(e) for e in first.receive(1, 0)] == [b"kept"]
    assert sc.subscribe("s5", "second", STREAM).receive_any(0) == []


def test_counts_report_producer_workers_and_consumers(connect):
    sc1, sc2 = connect(StreamClient), connect(StreamClient)
    p1 = sc1.create_producer("s6")
    p2 = sc2.create_producer("s6")
    c1 = sc1.subscribe("s6", "a", STREAM)
    c2 = sc2.subscribe("s6", "b", STREAM)
    assert sc1.query_global_producer_num("s6") == 1  # two producers, one worker
    assert sc2.query_global_consumer_num("s6") == 2
    c1.close()
    assert sc1.query_global_consumer_num("s6") == 1
    p1.close()
    assert sc1.query_global_producer_num("s6") == 1
    p2.close()
    assert sc1.query_global_producer_num("s6") == 0
    c2.close()


def test_delete_stream_is_refused_while_in_use_and_then_starts_afresh(connect):
    sc = connect(StreamClient)
    producer = sc.create_producer("s7")
    consumer = sc.subscribe("s7", "sub", STREAM)
    producer.send(b"old")
    with pytest.raises(RuntimeError, match="still has open"):
        sc.delete_stream("s7")
    producer.close()
    consumer.close()
    sc.delete_stream("s7")
    with pytest.raises(RuntimeError, match="closed"):
        producer.send(b"x")
    p2 = sc.create_producer("s7", 5, 1024 * 1024, 1024 * 1024, False, 1)
    p2.send(b"new")
    assert [bytes(e) for e in sc.subscribe("s7", "sub", STREAM).receive(5, 100)] == [b"new"]


def test_parameters_are_checked_with_openyuanrong_error_types(connect):
    sc = connect(StreamClient)
    with pytest.raises(TypeError):
        sc.create_producer(5)
    with pytest.raises(RuntimeError, match="delay_flush_time_ms") as info:
        sc.create_producer("p", 2**63)
    assert isinstance(info.value, InvalidRequest)
    with pytest.raises(RuntimeError, match="reserve_size"):
        sc.create_producer("p", 5, 8192, 64 * 1024 * 1024, False, 0, False, 12 * 1024)
    consumer = sc.subscribe("p", "s", STREAM)
    with pytest.raises(RuntimeError, match="expect_num"):
        consumer.receive(2**31, 10)
    with pytest.raises(RuntimeError, match="timeout_ms"):
        consumer.receive(1, 2**31)
    with pytest.raises(TypeError):
        sc.create_producer("p").send("str is not bytes")
