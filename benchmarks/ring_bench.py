"""Ring and metastore micro-benchmarks (store cluster foundations).

    .venv/bin/python benchmarks/ring_bench.py [--repeats 5] [--etcd3gw]

Reports medians over ``--repeats`` runs: ring build time, owner lookups/s,
diff time on a join, metastore op rates (builtin vs a real etcd on loopback),
and membership join latency / failure-detection time. ``--etcd3gw`` adds the
evaluation of the ``etcd3gw`` client (``pip install etcd3gw``) side by side with
kiloRL's own etcd client on the same etcd: op rates, watch latency, and whether a
watch surfaces compaction and a lost server (what ``Metastore`` requires).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
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


def _rate(fn, n=300):
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t)


def _watch_latency_ms(put, next_event, n=30):
    lats = []
    for i in range(n):
        t = time.perf_counter()
        put(i)
        next_event()
        lats.append(time.perf_counter() - t)
    return statistics.median(lats) * 1e3


def _first_event(iterator, wait_s):
    got = []
    th = threading.Thread(target=lambda: got.append(next(iterator, "end of stream")), daemon=True)
    th.start()
    th.join(wait_s)
    return got[0] if got else None


def etcd3gw_numbers(etcd, repeats):
    """kiloRL's etcd client vs etcd3gw, same server, same operations (medians of ``repeats``)."""
    import etcd3gw

    host, port = etcd.url[len("etcd://"):].rsplit(":", 1)
    ours, gw = open_metastore(etcd.url), etcd3gw.client(host=host, port=int(port))
    ns = f"/bench/{uuid.uuid4().hex}/"
    a, b = (ns + "a/").encode(), (ns + "b/").encode()
    rows = []

    def pair(label, mine, theirs, unit="ops/s"):
        m, t = median_of(repeats, mine), median_of(repeats, theirs)
        digits = 1 if unit == "ms" else 0
        rows.append((f"etcd client: {label} (ours / etcd3gw)", f"{m:.{digits}f} / {t:.{digits}f} {unit}"))

    pair("put", lambda: _rate(lambda i: ours.put(a + b"k%d" % i, b"v")),
         lambda: _rate(lambda i: gw.put(b + b"k%d" % i, b"v")))
    pair("get", lambda: _rate(lambda i: ours.get(a + b"k%d" % i)), lambda: _rate(lambda i: gw.get(b + b"k%d" % i)))
    lease_o, lease_g = ours.grant_lease(5), gw.lease(5)
    pair("lease keepalive", lambda: _rate(lambda i: ours.keepalive(lease_o.id)),
         lambda: _rate(lambda i: lease_g.refresh()))
    w = ours.watch(a + b"w/")
    it, cancel = gw.watch_prefix(b + b"w/")
    time.sleep(0.2)  # etcd3gw gives no signal that its watch is registered
    pair("watch put->event", lambda: _watch_latency_ms(lambda i: ours.put(a + b"w/x", b"%d" % i),
                                                      lambda: w.get(timeout=5)),
         lambda: _watch_latency_ms(lambda i: gw.put(b + b"w/x", b"%d" % i), lambda: next(it)), unit="ms")
    w.close()
    cancel()
    # Semantics the Metastore contract needs: a compacted start revision is an error ...
    rev = ours.revision()
    ours.put(a + b"c", b"1")
    ours.put(a + b"c", b"2")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("POST", "/v3/kv/compaction", json.dumps({"revision": str(rev + 2)}))
    conn.getresponse().read()
    try:
        ours.watch(a, start_revision=rev).get(timeout=3)
        mine = "no error"
    except Exception as exc:  # noqa: BLE001
        mine = type(exc).__name__
    it, cancel = gw.watch_prefix(a, start_revision=rev)
    theirs = _first_event(it, 3)
    cancel()
    rows.append(("etcd client: watch from a compacted revision (ours / etcd3gw)",
                 f"{mine} / {'no error, no event in 3 s' if theirs is None else theirs}"))
    # ... and a watch whose server dies ends (so the view can resync).
    w = ours.watch(a + b"d/")
    it, cancel = gw.watch_prefix(b + b"d/")
    time.sleep(0.2)
    etcd.kill()
    theirs = _first_event(it, 5)
    try:
        w.get(timeout=5)
        mine = "nothing in 5 s"
    except Exception as exc:  # noqa: BLE001
        mine = type(exc).__name__
    cancel()
    rows.append(("etcd client: server killed under a watch (ours / etcd3gw)",
                 f"{mine} / {'still blocked after 5 s' if theirs is None else theirs}"))
    etcd.start()
    ours.close()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--etcd3gw", action="store_true", help="only the etcd3gw evaluation")
    args = parser.parse_args()
    if args.etcd3gw:
        with EtcdProcess() as etcd:
            rows = etcd3gw_numbers(etcd, args.repeats)
    else:
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
