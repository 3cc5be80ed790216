"""Streams: groups, acks, redelivery after a consumer dies, back-pressure."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from store_helpers import run_python

from kilorl.store import StoreTimeout


def test_send_receive_ack_and_groups(worker, client):
    prod = client.producer("rollouts")
    ids = [prod.send({"obs": np.full((4, 3), i, dtype=np.float32)}) for i in range(5)]
    assert ids == sorted(ids)
    learners = client.consumer("rollouts", "learners")
    other = worker.client().consumer("rollouts", "loggers")  # a second group sees everything too
    got = {g: [g.receive(timeout=5) for _ in range(5)] for g in (learners, other)}
    for group, msgs in got.items():
        assert [m.value["obs"][0, 0] for m in msgs] == [0, 1, 2, 3, 4]
        assert group.receive(timeout=0.1) is None
    assert client.stats()["streams"] == ["rollouts"]
    for group, msgs in got.items():
        assert group.ack(*[m.id for m in msgs]) == 5


def test_one_delivery_per_group_across_consumers(worker, client):
    prod = client.producer("work")
    for i in range(40):
        prod.send(str(i).encode())
    c1, c2 = worker.client().consumer("work", "g"), worker.client().consumer("work", "g")
    seen = []
    for c in (c1, c2) * 20:
        m = c.receive(timeout=5)
        seen.append(bytes(m.value))
        c.ack(m.id)
    assert sorted(seen, key=int) == [str(i).encode() for i in range(40)]


def test_unacked_messages_redelivered_after_consumer_dies(worker, client):
    prod = client.producer("jobs")
    for i in range(3):
        prod.send(f"job{i}".encode())
    code = f"""
import os, signal
from kilorl.store import StoreClient
c = StoreClient({worker.address!r}, token={worker.token!r}).consumer("jobs", "workers")
m1 = c.receive(timeout=5); m2 = c.receive(timeout=5)
c.ack(m1.id)
print(bytes(m1.value).decode(), bytes(m2.value).decode(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # dies holding m2 unacked
"""
    r = run_python(code)
    assert r.stdout.split() == ["job0", "job1"]
    survivor = client.consumer("jobs", "workers")
    got = [survivor.receive(timeout=5) for _ in range(2)]
    assert sorted(bytes(m.value) for m in got) == [b"job1", b"job2"]
    redelivered = [m for m in got if bytes(m.value) == b"job1"][0]
    assert redelivered.deliveries == 2
    survivor.ack(*[m.id for m in got])
    assert survivor.receive(timeout=0.1) is None


def test_back_pressure_when_full(worker, client):
    prod = client.producer("bounded", capacity=3)
    for i in range(3):
        prod.send(bytes([i]))
    t0 = time.monotonic()
    with pytest.raises(StoreTimeout, match="full"):
        prod.send(b"x", timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    cons = worker.client().consumer("bounded", "g")
    sent = []
    blocked = threading.Thread(target=lambda: sent.append(prod.send(b"late", timeout=30)))
    blocked.start()
    time.sleep(0.2)
    assert not sent  # still blocked: the stream is full
    m = cons.receive(timeout=5)
    cons.ack(m.id)  # frees one slot
    blocked.join(10)
    assert sent and not blocked.is_alive()
    values = []
    while (m := cons.receive(timeout=0.2)) is not None:
        values.append(bytes(m.value))
        cons.ack(m.id)
    assert values == [b"\x01", b"\x02", b"late"]


def test_producer_and_consumer_processes(worker, client):
    producer = subprocess.Popen([sys.executable, "-c", f"""
import numpy as np
from kilorl.store import StoreClient
p = StoreClient({worker.address!r}, token={worker.token!r}).producer("batches", capacity=8)
for i in range(100):
    p.send(np.full(1000, i, dtype=np.int64), timeout=60)
"""])
    try:
        cons = client.consumer("batches", "learner")
        total = 0
        for _ in range(100):
            m = cons.receive(timeout=30)
            assert (m.value == m.value[0]).all()
            total += int(m.value[0])
            cons.ack(m.id)
        assert total == sum(range(100))
    finally:
        producer.wait(60)
    assert producer.returncode == 0


def test_unacked_message_redelivered_after_ack_timeout(workers):
    w = workers("--shm-size", "8MiB", "--ack-timeout", "2")
    c1, c2 = w.client(), w.client()
    c1.producer("s").send(b"task")
    slow = c1.consumer("s", "g")
    m = slow.receive(timeout=5)
    assert m.deliveries == 1
    other = c2.consumer("s", "g")
    assert other.receive(timeout=0.1) is None  # still pending with the slow consumer
    again = other.receive(timeout=10)  # redelivered once the ack timeout passes
    assert again.id == m.id and bytes(again.value) == b"task" and again.deliveries == 2
    other.ack(again.id)
    assert slow.receive(timeout=0.5) is None
