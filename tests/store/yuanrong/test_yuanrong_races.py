"""openYuanrong calls that must be exact under concurrent clients (separate processes on one
worker): ``mset(..., NX)`` lets exactly one writer of a key win, global reference counts
sum exactly and an object goes exactly when the last reference is released."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kilorl.store.yuanrong import KVClient, ObjectClient

RACER = """
import sys, time
from kilorl.store.yuanrong import KVClient, ObjectClient, WriteMode
from kilorl.store.yuanrong.kv_client import ExistenceOpt
op, port, token, start, me = sys.argv[1:6]
if op == "mset":
    c = KVClient("127.0.0.1", int(port), token=token)
    c.init()
    time.sleep(max(0.0, float(start) - time.time()))
    keys = [f"k{i}" for i in range(5)]
    failed = c.mset(keys, [me.encode()] * 5, WriteMode.NONE_L2_CACHE, 0, ExistenceOpt.NX)
    print(",".join(k for k in keys if k not in failed))
else:
    c = ObjectClient("127.0.0.1", int(port), token=token)
    c.init()
    time.sleep(max(0.0, float(start) - time.time()))
    for _ in range(20):
        c.g_increase_ref(["obj"])
    print("done")
"""


def _race(op: str, yr_worker, n: int) -> list[str]:
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", RACER, op, str(yr_worker.port), yr_worker.token, str(start),
                               str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


@pytest.mark.timeout(180)
def test_racing_nx_msets_store_each_key_once(yr_worker, connect):
    outs = _race("mset", yr_worker, 5)
    won = [set(o.split(",")) - {""} for o in outs]
    everything = [k for w in won for k in w]
    assert sorted(everything) == [f"k{i}" for i in range(5)]  # every key won by exactly one process
    kv = connect(KVClient)
    for i, w in enumerate(won):
        for key in w:
            assert kv.get([key])[0] == str(i).encode()  # and it holds that winner's value


@pytest.mark.timeout(180)
def test_racing_global_ref_increments_sum_exactly(yr_worker, connect):
    _race("gref", yr_worker, 4)
    oc = connect(ObjectClient)
    assert oc.query_global_ref_num("obj") == 80
    oc.put("obj", b"payload")
    for _ in range(79):
        oc.g_decrease_ref(["obj"])
    assert oc.get(["obj"], 0)[0] is not None  # one reference left: the object stays
    oc.g_decrease_ref(["obj"])
    assert oc.query_global_ref_num("obj") == 0
    with pytest.raises(RuntimeError, match="Key not found"):
        oc.get(["obj"], 0)
