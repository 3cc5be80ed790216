"""Data system, one node: kiloRL store vs redis-server vs Ray's object store vs numpy memcpy.

For 1 KiB, 1 MiB, 64 MiB and 256 MiB values it measures, in one run on this machine:
set throughput, get latency (p50/p99) and get+read bandwidth with 1 and 4 reader
processes. "read" copies every byte of the value into the reader's own buffer
(``np.copyto``), the same work as the memcpy baseline, so get+read / memcpy says what
the store's get costs on top of touching the data. Every figure is the median of
``--runs`` runs. kiloRL and Redis are both reached over a Unix socket (the local
default of each); kiloRL reads are zero-copy views of its shared-memory arena.

    python benchmarks/store_bench.py [--sizes 1KiB,1MiB,64MiB,256MiB] [--runs 5] [--json out.json]

Needs ``pip install -e '.[bench]'`` (redis client); ``redis-server`` comes from Debian
through ``scripts/services.sh``, which the benchmark runs itself when it is missing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = {"1KiB": 1 << 10, "1MiB": 1 << 20, "64MiB": 64 << 20, "256MiB": 256 << 20}


def ops_for(size: int) -> int:
    return max(3, min(2000, (256 << 20) // max(size, 1) // 64 or 3)) if size > 1 << 20 else (2000 if size <= 1 << 10 else 200)


def reads_for(size: int) -> int:
    """get+read iterations per run: about 1.5 GB of copying, so one run is not a 50 ms blip."""
    return max(3, min(200, int(1.5e9 / size)))


def median(xs):
    return statistics.median(xs)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- systems under test: each gives set(value), get() -> obj, read(obj, dst) ------------
class Kilorl:
    name = "kilorl"

    def __init__(self, tmp: Path, arena: str):
        self.run_dir = tmp / "kilorl-run"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
             "--token", "bench", "--shm-size", arena, "--run-dir", str(self.run_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not (self.run_dir / "worker.json").exists():
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("kilorl worker did not start")
            time.sleep(0.05)
        self.address = f"127.0.0.1:{json.loads((self.run_dir / 'worker.json').read_text())['port']}"
        self.connect()

    def connect(self):
        from kilorl.store import StoreClient

        self.c = StoreClient(self.address, token="bench")

    def set(self, key, value):
        self.c.set(key, value)

    def get(self, key):
        return self.c.get(key)

    def close(self):
        self.c.close()
        self.proc.terminate()
        self.proc.wait(30)


class Redis:
    name = "redis"

    def __init__(self, tmp: Path):
        if not shutil.which("redis-server"):  # the benchmark's setup: Debian's redis-server
            subprocess.run(["bash", str(Path(__file__).resolve().parents[1] / "scripts" / "services.sh")], check=True)
        if not shutil.which("redis-server"):
            raise RuntimeError("redis-server not found and scripts/services.sh could not install it")
        self.sock = str(tmp / "redis.sock")
        self.proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", self.sock, "--save", "",
                                      "--appendonly", "no", "--maxmemory", "0", "--dir", str(tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(self.sock):
            if time.time() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        self.connect()

    def connect(self):
        import redis

        self.c = redis.Redis(unix_socket_path=self.sock)
        self.c.ping()

    def set(self, key, value):
        self.c.set(key, memoryview(value))

    def get(self, key):
        return np.frombuffer(self.c.get(key), dtype=np.uint8)

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)


class Ray:
    name = "ray"

    def __init__(self, tmp: Path, store_bytes: int):
        import ray

        ray.init(num_cpus=4, object_store_memory=store_bytes, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(tmp / "ray"))
        self.ray = ray
        self.refs = {}

    def set(self, key, value):
        self.refs[key] = self.ray.put(value)

    def get(self, key):
        return self.ray.get(self.refs[key])

    def close(self):
        self.ray.shutdown()


class Memcpy:
    """The floor: a store that is a private numpy buffer (get = one copy out)."""

    name = "memcpy"

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        buf = self.data.get(key)
        if buf is None or buf.nbytes != value.nbytes:
            buf = self.data[key] = np.empty_like(value)
        np.copyto(buf, value)

    def get(self, key):
        return self.data[key]

    def close(self):
        pass


# -- measurements ------------------------------------------------------------------------
def bench_set(sys_, value, n):
    t0 = time.perf_counter()
    for _ in range(n):
        sys_.set("bench/set", value)
    dt = time.perf_counter() - t0
    return n / dt


def bench_get(sys_, key, n):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        v = sys_.get(key)
        lat.append((time.perf_counter_ns() - t0) / 1e3)
        del v
    return lat


def bench_get_read(sys_, key, size, n):
    dst = np.empty(size, dtype=np.uint8)
    dst[::4096] = 0
    t0 = time.perf_counter()
    for _ in range(n):
        v = sys_.get(key)
        np.copyto(dst, v.reshape(-1).view(np.uint8) if isinstance(v, np.ndarray) else v)
        del v
    return n * size / (time.perf_counter() - t0)


def _reader(kind, arg, key, size, n, barrier, out):
    if kind == "kilorl":
        from kilorl.store import StoreClient

        c = StoreClient(arg, token="bench")
        get = c.get
    elif kind == "redis":
        import redis

        r = redis.Redis(unix_socket_path=arg)
        get = lambda k: np.frombuffer(r.get(k), dtype=np.uint8)  # noqa: E731
    else:
        src = np.full(size, 7, dtype=np.uint8)
        get = lambda k: src  # noqa: E731
    dst = np.empty(size, dtype=np.uint8)
    np.copyto(dst, get(key))  # warm up: page tables, buffers
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(n):
        v = get(key)
        np.copyto(dst, v)
        del v
    out.put((t0, time.perf_counter()))


def parallel_read(kind, arg, key, size, n, readers):
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(readers), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(kind, arg, key, size, n, barrier, out)) for _ in range(readers)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return readers * n * size / (max(e for _, e in spans) - min(s for s, _ in spans))


def ray_parallel_read(ray_sys, key, size, n, readers):
    ray = ray_sys.ray

    @ray.remote(num_cpus=1)
    class Reader:
        def __init__(self):
            self.dst = np.empty(size, dtype=np.uint8)

        def warm(self, refs):
            np.copyto(self.dst, ray.get(refs[0]))
            return True

        def run(self, refs, start_at):
            while time.time() < start_at:
                pass
            t0 = time.time()
            for _ in range(n):
                v = ray.get(refs[0])
                np.copyto(self.dst, v)
                del v
            return t0, time.time()

    actors = [Reader.remote() for _ in range(readers)]
    ref = [ray_sys.refs[key]]  # wrapped in a list so the actor receives the ref, not the value
    ray.get([a.warm.remote(ref) for a in actors])
    start_at = time.time() + 0.5
    spans = ray.get([a.run.remote(ref, start_at) for a in actors])
    for a in actors:
        ray.kill(a)
    return readers * n * size / (max(e for _, e in spans) - min(s for s, _ in spans))


def one_run(s, value: np.ndarray, size: int) -> dict:
    """One run of every measurement for one system and size."""
    n = ops_for(size)
    s.set("bench/get", value)
    r = {"set_ops": bench_set(s, value, n)}
    if s.name != "memcpy":
        s.set("bench/set", value[:1])  # free the store's big set target (memcpy keeps its warm buffer)
    lat = bench_get(s, "bench/get", n)
    r.update(get_p50_us=pct(lat, 0.5), get_p99_us=pct(lat, 0.99))
    if size >= 1 << 20:
        r["get_read_1_GBps"] = bench_get_read(s, "bench/get", size, reads_for(size)) / 1e9
        nr = max(3, min(8, reads_for(size) // 2))
        if s.name == "ray":
            bw4 = ray_parallel_read(s, "bench/get", size, nr, 4)
        else:
            arg = {"kilorl": getattr(s, "address", None), "redis": getattr(s, "sock", None)}.get(s.name)
            bw4 = parallel_read(s.name, arg, "bench/get", size, nr, 4)
        r["get_read_4_GBps"] = bw4 / 1e9
    if s.name != "memcpy":
        s.set("bench/get", value[:1])
    return r


def run(args) -> dict:
    sizes = {k: SIZES[k] for k in args.sizes.split(",")}
    biggest = max(sizes.values())
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-"))
    ram_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    results: dict = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
                                f"{os.cpu_count()} cpus, {ram_gib} GiB RAM",
                     "runs": args.runs, "sizes": {}, "per_run": {}}
    systems = []
    try:
        systems.append(Memcpy())
        systems.append(Kilorl(tmp, f"{max(4 * biggest, 256 << 20)}"))
        systems.append(Redis(tmp))
        if not args.no_ray:
            systems.append(Ray(tmp, max(4 * biggest, 512 << 20)))
        for label, size in sizes.items():
            value = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
            runs = results["per_run"][label] = {s.name: [] for s in systems}
            # Systems interleaved run by run: a load change on this shared machine hits all of them.
            for _ in range(args.runs):
                for s in systems:
                    runs[s.name].append(one_run(s, value, size))
            row = results["sizes"][label] = {}
            for name, rs in runs.items():
                row[name] = {k: median([r[k] for r in rs]) for k in rs[0]}
                row[name]["get_ops"] = 1e6 / row[name]["get_p50_us"]
                row[name]["set_GBps"] = row[name]["set_ops"] * size / 1e9
                print(f"{label:>7s} {name:7s} " + " ".join(f"{k}={v:.4g}" for k, v in row[name].items()), flush=True)
    finally:
        for s in systems:
            try:
                s.close()
            except Exception as exc:  # keep closing the others
                print(f"closing {s.name}: {exc}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return results


METRICS = [("set_ops", "set", False), ("get_p50_us", "get", True), ("get_read_1_GBps", "get+read(1)", False),
           ("get_read_4_GBps", "get+read(4)", False)]


def ratios(results: dict) -> list[str]:
    """kiloRL / other for each metric: the median of per-run (paired) ratios."""
    lines = []
    for label, runs in results["per_run"].items():
        k = runs.get("kilorl")
        for other in ("redis", "ray", "memcpy"):
            o = runs.get(other)
            if not o or not k:
                continue
            parts = []
            for metric, name, lower_is_better in METRICS:
                if metric not in k[0] or (other == "memcpy" and metric == "get_p50_us"):
                    continue  # memcpy's "get" returns a reference: only its copy figures compare
                rs = [(b[metric] / a[metric]) if lower_is_better else (a[metric] / b[metric]) for a, b in zip(k, o)]
                parts.append(f"{name} {median(rs):.2f}x")
            lines.append(f"{label:>7s} kilorl vs {other:6s}: " + ", ".join(parts))
    return lines


def markdown(results: dict) -> str:
    """A results table and the paired ratios, as recorded in docs/benchmarks.md."""
    out = ["| size | system | set ops/s | set GB/s | get p50 µs | get p99 µs | get+read 1 reader GB/s | "
           "get+read 4 readers GB/s |", "|---|---|---|---|---|---|---|---|"]
    for label, row in results["sizes"].items():
        for name, r in row.items():
            bw1 = f"{r['get_read_1_GBps']:.2f}" if "get_read_1_GBps" in r else "–"
            bw4 = f"{r['get_read_4_GBps']:.2f}" if "get_read_4_GBps" in r else "–"
            out.append(f"| {label} | {name} | {r['set_ops']:,.0f} | {r['set_GBps']:.3f} | {r['get_p50_us']:,.1f} | "
                       f"{r['get_p99_us']:,.1f} | {bw1} | {bw4} |")
    out += ["", "Ratios (kiloRL / other, median of per-run ratios; get = get throughput, 1/p50):", "", "```"]
    out += results["ratios"] + ["```"]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1KiB,1MiB,64MiB,256MiB")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--json", help="write results here")
    p.add_argument("--render", help="print the markdown table of a saved --json file and exit")
    args = p.parse_args()
    if args.render:
        print(markdown(json.loads(Path(args.render).read_text())))
        return
    results = run(args)
    results["ratios"] = ratios(results)
    print("\n".join(results["ratios"]))
    print(markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
