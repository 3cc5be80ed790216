"""The store requests of one parameter sync, one client, no contention: what a round trip costs.

Against one real store worker on this machine, the median of ``--n`` calls of: a ``ping``
(the floor of a round trip), the reader's request (``get_versions``: a 300-byte commit
record and one 20 KB range of each of two shards, the small policy of
``param_sync_bench.py``) with and without its wait, and the publisher's batch
(``publish_many`` of two 20 KB shards and the record). ``--runs`` repeats; cells are
medians over runs.

    python benchmarks/param_ops_bench.py [--n 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHARD = 20 * 1024
RECORD = 300


def median_us(fn, n: int) -> float:
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e6


def one_run(client, n: int, first_version: int) -> dict[str, float]:
    reads = [("rec", None), ("s0", [(0, SHARD)]), ("s1", [(0, SHARD)])]
    version = [first_version]

    def publish(_: int) -> None:
        version[0] += 1
        client.publish_many([("s0", b"x" * SHARD, version[0]), ("s1", b"x" * SHARD, version[0]),
                             ("rec", b"x" * RECORD, version[0])])

    publish(0)
    out = {
        "ping": median_us(lambda i: client.ping(), n),
        "get_versions (record + 2 ranges)": median_us(lambda i: client.get_versions(reads), n),
        "get_versions with min_version (satisfied)": median_us(
            lambda i: client.get_versions(reads, min_version=1, timeout=5), n),
        "publish_many (2 shards + record)": median_us(publish, n),
    }
    out["_version"] = version[0]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    from tests.store.store_helpers import WorkerProcess

    worker = WorkerProcess(Path(tempfile.mkdtemp()), "--shm-size", "256MiB", "--keep-versions", "2", name="w").start()
    try:
        client = worker.client()
        runs, version = [], 0
        for _ in range(args.runs):
            r = one_run(client, args.n, version)
            version = int(r.pop("_version"))
            runs.append(r)
        client.close()
    finally:
        worker.proc.kill()
        worker.proc.wait(10)
        worker.remove_arena()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, median of {args.runs} runs of {args.n} calls. "
          f"Command: `python benchmarks/param_ops_bench.py {' '.join(argv or sys.argv[1:])}`\n")
    print("| request | median (us) |\n|---|---|")
    for name in runs[0]:
        print(f"| {name} | {float(np.median([r[name] for r in runs])):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
