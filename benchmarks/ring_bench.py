"""Ring and metastore micro-benchmarks (store cluster foundations).

    .venv/bin/python benchmarks/ring_bench.py [--repeats 5]

Reports medians over ``--repeats`` runs: ring build time, owner lookups/s,
diff time on a join, metastore op rates (builtin vs a real etcd on loopback),
and membership join latency / failure-detection time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from kilorl.store.mesh.membership import MemberInfo, Membership, MembershipConfig, MeshView
from kilorl.store.mesh.ring import HashRing, diff
from kilorl.store.metastore import open_metastore
from kilorl.store.metastore.etcd_process import EtcdProcess


def median_of(repeats, fn):
    return statistics.median(fn() for _ in range(repeats))


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def ring_numbers(repeats):
    rows = []
    for n in (4, 64, 512):
        members = [f"w{i}" for i in range(n)]
        build = median_of(repeats, lambda members=members: timed(lambda: HashRing(members)))
        rows.append((f"build ring, {n} members x 256 vnodes", f"{build * 1e3:.1f} ms"))
    ring = HashRing([f"w{i}" for i in range(64)])
    keys = [f"param/layer{i}/shard" for i in range(100_000)]

    def lookups():
        t = timed(lambda: [ring.owner(k) for k in keys])
        return len(keys) / t

    rows.append(("owner() lookups, 64 members", f"{median_of(repeats, lookups) / 1e3:.0f} k/s"))
    grown = ring.with_member("w64")
    for replicas in (1, 3):
        took = median_of(repeats, lambda replicas=replicas: timed(lambda: diff(ring, grown, replicas)))
        rows.append((f"diff 64 -> 65 members, replicas={replicas}", f"{took * 1e3:.1f} ms"))
    return rows


def metastore_numbers(url, label, repeats):
    store = open_metastore(url)
    ns = f"/bench/{uuid.uuid4().hex}/".encode()
    rows = []
    try:
        def rate(op, count=300):
            t = timed(lambda: [op(i) for i in range(count)])
            return count / t

        puts = median_of(repeats, lambda: rate(lambda i: store.put(ns + b"k%d" % i, b"v")))
        rows.append((f"{label}: put", f"{puts:.0f} ops/s"))
        rows.append((f"{label}: get", f"{median_of(repeats, lambda: rate(lambda i: store.get(ns + b'k%d' % i))):.0f} ops/s"))
        store.put(ns + b"cas", b"0")

        def cas_rate():
            def op(i):
                kv = store.get(ns + b"cas")
                store.compare_and_swap(ns + b"cas", kv.mod_revision, b"%d" % i)
            return rate(op, 150)

        rows.append((f"{label}: get+CAS", f"{median_of(repeats, cas_rate):.0f} ops/s"))
        ttl = 1.0 if url == "builtin" else 2.0

        def join_latency():
            config = MembershipConfig(prefix=f"/bench/{uuid.uuid4().hex}/", lease_ttl=ttl)
            m = Membership(store, MemberInfo("a", "127.0.0.1:1"), config)
            t = timed(m.join)
            m.leave()
            return t

        rows.append((f"{label}: member join (lease+record+ring CAS)", f"{median_of(repeats, join_latency) * 1e3:.1f} ms"))

        def detection():
            config = MembershipConfig(prefix=f"/bench/{uuid.uuid4().hex}/", lease_ttl=ttl)
            survivor = Membership(store, MemberInfo("a", "127.0.0.1:1"), config)
            doomed = Membership(store, MemberInfo("b", "127.0.0.1:2"), config)
            survivor.join()
            doomed.join()
            view = MeshView(store, config).start()
            t = time.perf_counter()
            doomed.abandon()
            view.wait_for(lambda s: "b" not in s.ring, timeout=ttl + 10)
            elapsed = time.perf_counter() - t
            view.close()
            survivor.leave()
            return elapsed

        rows.append((f"{label}: failure detected after heartbeats stop (TTL {ttl:.0f}s)", f"{median_of(3, detection):.2f} s"))
    finally:
        store.delete_prefix(ns)
        store.close()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = ring_numbers(args.repeats)
    rows += metastore_numbers("builtin", "builtin", args.repeats)
    with EtcdProcess() as etcd:
        rows += metastore_numbers(etcd.url, "etcd 3.4 (HTTP gateway)", args.repeats)
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure'.ljust(width)} | median |")
    print(f"|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
