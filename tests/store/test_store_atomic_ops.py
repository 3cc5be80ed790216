"""Set-if-absent, ``incr`` and ``exists_many`` against real worker processes.

The race tests start N client processes that wait on a shared start time and then all do
the op on one key: exactly one set-if-absent may store, and the increments must sum
exactly. On a mesh the clients are spread over all workers (built-in metastore and etcd).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kilorl.store import InvalidRequest
from tests.store.etcd_fixture import etcd_server  # noqa: F401  (fixture)

RACER = """
import sys, time
from kilorl.store import StoreClient
op, address, token, key, n, start = sys.argv[1:7]
c = StoreClient(address, token=token)
time.sleep(max(0.0, float(start) - time.time()))
if op == "nx":
    print(int(c.set(key, f"from-{sys.argv[7]}".encode(), if_absent=True)))
else:
    for _ in range(int(n)):
        c.incr(key, 1)
    print("done")
"""


def race(op: str, addresses: list[str], token: str, key: str, n_procs: int, per_proc: int = 1) -> list[str]:
    """Runs ``n_procs`` racing client processes (round-robin over ``addresses``); their stdout lines."""
    start = time.time() + 3.0  # every process is connected before the start
    procs = [subprocess.Popen([sys.executable, "-c", RACER, op, addresses[i % len(addresses)], token, key,
                               str(per_proc), str(start), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(n_procs)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


@pytest.fixture(params=["builtin", "etcd"])
def metastore(request) -> str:
    if request.param == "builtin":
        return "builtin"
    return request.getfixturevalue("etcd_server").url


# -- one worker ---------------------------------------------------------------------------
def test_set_if_absent_stores_only_a_new_key(client):
    assert client.set("nx", b"first", if_absent=True) is True
    assert client.set("nx", b"second", if_absent=True) is False
    assert bytes(client.get("nx")) == b"first"
    assert client.set("nx", b"third") is True  # a plain set still overwrites
    assert bytes(client.get("nx")) == b"third"
    client.delete("nx")
    assert client.set("nx", b"again", if_absent=True) is True


def test_set_if_absent_of_a_large_value_through_the_arena(client):
    big = b"x" * (1 << 20)
    assert client.set("big", big, if_absent=True) is True
    assert client.set("big", b"y" * (1 << 20), if_absent=True) is False
    assert bytes(client.get("big")[:4]) == b"xxxx"
    assert client.stats()["objects"] == 1  # the loser's arena bytes were given back, not stored


def test_set_if_absent_sees_an_expired_key_as_absent(client):
    client.set("short", b"a", ttl=0.2)
    deadline = time.monotonic() + 10
    while client.exists("short") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.set("short", b"b", if_absent=True) is True


def test_incr_counts_from_zero_and_stores_decimal_bytes(client):
    assert client.incr("n") == 1
    assert client.incr("n", 41) == 42
    assert client.incr("n", -50) == -8
    assert bytes(client.get("n")) == b"-8"
    client.set("s", b"17")
    assert client.incr("s", 3) == 20


def test_incr_of_a_non_integer_value_names_the_key(client):
    client.set("text", b"hello")
    with pytest.raises(InvalidRequest, match="'text'.*not a decimal integer"):
        client.incr("text")
    with pytest.raises(InvalidRequest, match="delta"):
        client.incr("text", 1.5)  # type: ignore[arg-type]
    assert client.ping()


def test_exists_many_answers_in_order(client):
    client.set("a", b"1")
    client.set("c", b"3")
    assert client.exists_many(["a", "b", "c", "a"]) == [True, False, True, True]
    assert client.exists_many([]) == []
    with pytest.raises(InvalidRequest, match="keys"):
        client.exists_many(["a", 3])  # type: ignore[list-item]


@pytest.mark.timeout(180)
def test_racing_processes_on_one_worker(worker):
    wins = race("nx", [worker.address], worker.token, "race", 6)
    assert sorted(wins) == ["0"] * 5 + ["1"]
    race("incr", [worker.address], worker.token, "count", 4, per_proc=25)
    with worker.client() as c:
        assert bytes(c.get("race")).startswith(b"from-")
        assert c.incr("count", 0) == 100


# -- a mesh -------------------------------------------------------------------------------
@pytest.mark.timeout(240)
def test_racing_processes_on_a_mesh(cluster_of, metastore):
    cluster = cluster_of(metastore)
    members = cluster.start(3)
    addresses = [w.address for w in members]
    token = members[0].token
    for i in range(3):  # several keys, so that owners differ from the clients' workers
        wins = race("nx", addresses, token, f"race{i}", 6)
        assert sorted(wins) == ["0"] * 5 + ["1"], f"race{i}: {wins}"
    race("incr", addresses, token, "count", 6, per_proc=15)
    values = set()
    for w in members:
        with w.client() as c:
            assert c.exists_many(["race0", "race1", "race2", "missing"]) == [True, True, True, False]
            values.add(bytes(c.get("race0")))
            assert c.incr("count", 0) == 90
    assert len(values) == 1  # every worker serves the one winner's value
