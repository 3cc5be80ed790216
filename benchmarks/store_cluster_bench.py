"""Data system, many nodes: remote vs local get, fan-out relay, metadata migration.

All workers are real processes on this machine talking over loopback TCP (a remote get
pulls the bytes worker-to-worker, then the reader maps its own worker's arena).

1. **remote vs local get** (1 MiB, 256 MiB): get + read (copy every byte into the
   reader's buffer, as in ``store_bench.py``) through the holder worker (local: a
   zero-copy view) vs through another worker (remote: a chunked pull into that worker's
   arena, then a zero-copy view). Each remote run writes a new version first, so the
   reader's replica is invalidated and the bytes really cross.
2. **fan-out**: a 64 MiB object read at once by 4 workers x 2 reader clients; bytes sent
   by the source worker and time until all 8 readers have it, with the relay (fanout 2)
   and without (fanout 8: the source serves every worker).
3. **metadata migration**: 10,000 keys on 2 workers, a 3rd joins: time from the ring
   change until the joiner holds every record the new ring gives it; then it leaves
   (records handed back) and the time its graceful leave takes.
4. **versions across the mesh**: 3 workers; a client of worker C blocks in
   ``wait_version`` while a client of worker A publishes the next version (1 KiB):
   time from the start of ``publish`` on A until ``wait_version`` returns on C (median
   of 20 per run). Then a 16 MiB version read through B and C: bytes A served.

    python benchmarks/store_cluster_bench.py [--runs 5] [--metastore builtin|etcd] [--only PART] [--json out.json]

Medians of ``--runs`` runs (256 MiB and fan-out: ``max(3, runs // 2)``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

TOKEN = "bench-token"


class Worker:
    def __init__(self, base: Path, name: str, args: list[str]):
        self.run_dir = base / name
        self.run_dir.mkdir(parents=True)
        info = self.run_dir / "worker.json"
        cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
               "--run-dir", str(self.run_dir), "--token", TOKEN, "--log-level", "WARNING", *args]
        self.log = open(base / f"{name}.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not info.exists() or json.loads(info.read_text())["pid"] != self.proc.pid:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} failed: {(base / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.05)
        self.info = json.loads(info.read_text())
        self.address = f"127.0.0.1:{self.info['port']}"

    def client(self, **kw):
        from kilorl.store import StoreClient

        return StoreClient(self.address, token=TOKEN, **kw)

    def cluster(self) -> dict:
        with self.client(zero_copy=False) as c:
            return c.stats()["cluster"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        arena = self.info.get("arena")
        if arena and os.path.exists(arena):
            os.unlink(arena)


class Cluster:
    def __init__(self, base: Path, metastore: str, shm: str, extra: list[str] = ()):
        self.base, self.metastore, self.shm, self.extra = base, metastore, shm, list(extra)
        self.workers: list[Worker] = []
        self.started = 0
        self.all: list[Worker] = []
        self.name = f"b{len(list(base.iterdir()))}"

    def add(self) -> Worker:
        args = ["--shm-size", self.shm, "--cluster-name", self.name, *self.extra]
        if self.metastore == "builtin":
            args += ["--head"] if not self.workers else ["--join", self.workers[0].address]
        else:
            args += ["--metastore", self.metastore]
        w = Worker(self.base, f"{self.name}-w{self.started}", args)
        self.started += 1
        self.workers.append(w)
        self.all.append(w)
        return w

    def wait_ring(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while any(len(w.cluster()["ring"]["members"]) != n for w in self.workers if w.proc.poll() is None):
            if time.monotonic() > deadline:
                raise RuntimeError(f"ring of {n} not reached")
            time.sleep(0.05)

    def close(self) -> None:
        for w in self.all:
            w.kill()


def get_read(client, key: str, out: np.ndarray) -> float:
    t = time.perf_counter()
    v = client.get(key)
    np.copyto(out, np.asarray(v))
    dt = time.perf_counter() - t
    del v
    return dt


def bench_remote_vs_local(base: Path, metastore: str, runs: int) -> list[dict]:
    cluster = Cluster(base, metastore, "800MiB")
    rows = []
    try:
        a, b = cluster.add(), cluster.add()
        cluster.wait_ring(2)
        ca, cb = a.client(), b.client()
        for label, size in (("1MiB", 1 << 20), ("256MiB", 256 << 20)):
            n = runs if size <= 1 << 20 else max(3, runs // 2)
            value = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
            out = np.empty(size, dtype=np.uint8)
            local, remote = [], []
            for i in range(n):
                value[:8] = i  # a new version each run: B's replica is invalidated
                ca.set(f"bw/{label}", value)
                local.append(get_read(ca, f"bw/{label}", out))
                remote.append(get_read(cb, f"bw/{label}", out))
                assert np.array_equal(out, value)
                ca.flush_releases(), cb.flush_releases()
            lm, rm = statistics.median(local), statistics.median(remote)
            rows.append({"size": label, "runs": n, "local_s": lm, "remote_s": rm, "local_GBps": size / lm / 1e9,
                         "remote_GBps": size / rm / 1e9, "remote_over_local_time": rm / lm})
            print(f"  {label}: local get+read {size / lm / 1e9:.2f} GB/s, remote {size / rm / 1e9:.2f} GB/s "
                  f"(remote takes {rm / lm:.1f}x)", flush=True)
            ca.delete(f"bw/{label}")
    finally:
        cluster.close()
    return rows


def bench_fanout(base: Path, metastore: str, runs: int, fanout: int, size: int = 64 << 20) -> dict:
    cluster = Cluster(base, metastore, "320MiB", ["--fanout", str(fanout)])
    try:
        src = cluster.add()
        readers = [cluster.add() for _ in range(4)]
        cluster.wait_ring(5)
        cs = src.client()
        clients = [w.client() for w in readers for _ in range(2)]
        value = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8)
        ratios, times = [], []
        for i in range(max(3, runs // 2)):
            value[:8] = i
            cs.set("param", value)
            before = src.cluster()["counters"]["bytes_served"]
            barrier = threading.Barrier(len(clients) + 1)
            errors: list[Exception] = []

            def read(c, barrier=barrier, errors=errors, i=i) -> None:
                barrier.wait()
                try:
                    v = c.get("param")
                    if int(np.asarray(v)[0]) != i % 256:
                        errors.append(AssertionError("wrong version"))
                    del v
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

            threads = [threading.Thread(target=read, args=(c,)) for c in clients]
            for t in threads:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            times.append(time.perf_counter() - t0)
            if errors:
                raise errors[0]
            ratios.append((src.cluster()["counters"]["bytes_served"] - before) / size)
            for c in clients:
                c.flush_releases()
        row = {"fanout": fanout, "runs": len(times), "source_sent_x_size": statistics.median(ratios),
               "max_source_sent_x_size": max(ratios), "time_to_all_s": statistics.median(times)}
        print(f"  fanout {fanout}: source sent {row['source_sent_x_size']:.2f}x the object "
              f"(max {row['max_source_sent_x_size']:.2f}x), all 8 readers in {row['time_to_all_s']:.3f}s", flush=True)
        return row
    finally:
        cluster.close()


def bench_migration(base: Path, metastore: str, runs: int, keys: int = 10_000) -> dict:
    from kilorl.store.mesh.ring import HashRing

    cluster = Cluster(base, metastore, "128MiB")
    joins, leaves = [], []
    try:
        a, b = cluster.add(), cluster.add()
        cluster.wait_ring(2)
        ca, cb = a.client(), b.client()
        for i in range(keys):
            (ca if i % 2 else cb).set(f"m/{i}", b"v" * 100)
        for _ in range(max(3, runs // 2)):
            epoch = a.cluster()["epoch"]
            joiner = cluster.add()
            while a.cluster()["epoch"] == epoch:  # the ring change is committed ...
                time.sleep(0.002)
            t0 = time.perf_counter()
            info = joiner.cluster()
            ring = HashRing(list(info["ring"]["members"]))
            want = sum(1 for i in range(keys) if info["id"] in ring.successors(f"m/{i}", 2))
            while joiner.cluster()["records"] < want:  # ... until the joiner holds its records
                time.sleep(0.002)
            joins.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            joiner.proc.send_signal(signal.SIGTERM)
            joiner.proc.wait(60)
            leaves.append(time.perf_counter() - t0)
            cluster.workers.remove(joiner)
            cluster.wait_ring(2)
        missing = sum(1 for i in range(0, keys, 10) if bytes((ca if i % 3 else cb).get(f"m/{i}")) != b"v" * 100)
        row = {"keys": keys, "runs": len(joins), "join_migration_s": statistics.median(joins),
               "records_moved_per_join": want, "leave_s": statistics.median(leaves), "missing_after": missing}
        print(f"  {keys} keys: a joiner holds its {want} records {row['join_migration_s']:.3f}s after the ring "
              f"change; a graceful leave takes {row['leave_s']:.3f}s; missing after: {missing}", flush=True)
        return row
    finally:
        cluster.close()


def bench_versions(base: Path, metastore: str, runs: int, rounds: int = 20) -> dict:
    cluster = Cluster(base, metastore, "128MiB")
    try:
        a, b, c = cluster.add(), cluster.add(), cluster.add()
        cluster.wait_ring(3)
        ca, cb, cc = a.client(), b.client(), c.client()
        status = [w.client(zero_copy=False) for w in (a, b, c)]

        def waiters() -> int:  # long polls blocked at the name's owner, wherever it is
            return sum(s.stats()["cluster"]["version_waiters"] for s in status)

        medians = []
        for run in range(runs):
            name = f"lat{run}"
            lats = []
            for v in range(1, rounds + 1):
                waiting, done = threading.Event(), {}

                def wait(v=v, waiting=waiting, done=done, name=name) -> None:
                    waiting.set()
                    done["v"] = cc.wait_version(name, v, timeout=10)
                    done["t"] = time.perf_counter()

                t = threading.Thread(target=wait)
                t.start()
                waiting.wait(5)
                deadline = time.monotonic() + 5
                while waiters() != 1:  # C's wait_version is blocked at the owner before we publish
                    if time.monotonic() > deadline:
                        raise RuntimeError("wait_version never reached the name's owner")
                    time.sleep(0.001)
                t0 = time.perf_counter()
                ca.publish(name, b"x" * 1024)
                t.join(10)
                if done.get("v") != v:
                    raise RuntimeError(f"wait_version returned {done.get('v')}, expected {v}")
                lats.append(done["t"] - t0)
            medians.append(statistics.median(lats))
        size = 16 << 20
        value = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
        before = a.cluster()["counters"]["bytes_served"]
        ca.publish("big", value)
        for reader in (cb, cc):
            if not np.array_equal(reader.get_version("big").value, value):
                raise RuntimeError("version read through another worker differs")
        sent = (a.cluster()["counters"]["bytes_served"] - before) / size
        row = {"runs": runs, "rounds": rounds, "publish_to_wait_ms": statistics.median(medians) * 1e3,
               "worst_run_ms": max(medians) * 1e3, "source_sent_x_size_2_readers": sent}
        print(f"  publish on A -> wait_version returns on C: {row['publish_to_wait_ms']:.1f} ms median "
              f"(worst run {row['worst_run_ms']:.1f} ms); 16 MiB version read via B and C: A sent {sent:.2f}x",
              flush=True)
        return row
    finally:
        cluster.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--metastore", default="builtin", help="builtin or etcd (a throwaway etcd is started)")
    p.add_argument("--json")
    p.add_argument("--only", choices=["remote", "fanout", "migration", "versions"], help="run one part")
    args = p.parse_args()
    etcd = None
    metastore = "builtin"
    if args.metastore == "etcd":
        from kilorl.store.metastore.etcd_process import EtcdProcess

        etcd = EtcdProcess(data_dir=tempfile.mkdtemp(prefix="bench-etcd-")).start()
        metastore = etcd.url
    base = Path(tempfile.mkdtemp(prefix="store-cluster-bench-"))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"metastore {args.metastore}", flush=True)
    try:
        result: dict = {}
        want = {args.only} if args.only else {"remote", "fanout", "migration", "versions"}
        if "remote" in want:
            print("remote vs local get (get + read):", flush=True)
            result["remote_vs_local"] = bench_remote_vs_local(base, metastore, args.runs)
        if "fanout" in want:
            print("fan-out of 64 MiB to 4 workers x 2 readers:", flush=True)
            result["fanout"] = [bench_fanout(base, metastore, args.runs, 2),
                                bench_fanout(base, metastore, args.runs, 8)]
        if "migration" in want:
            print("metadata migration:", flush=True)
            result["migration"] = bench_migration(base, metastore, args.runs)
        if "versions" in want:
            print("versions across 3 workers:", flush=True)
            result["versions"] = bench_versions(base, metastore, args.runs)
    finally:
        if etcd is not None:
            etcd.stop()
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
