"""Set / get through ``kilorl.store.yuanrong.KVClient`` vs the native ``StoreClient``, and
side by side with openYuanrong datasystem itself (its own ``KVClient``, a worker started
with ``dscli start`` on loopback with a local etcd).

Rows per value size (1 KiB, 1 MiB, 256 MiB), each the median of several calls; the native
and the compatible client alternate call by call, openYuanrong runs a batch after each pair
of batches (rounds), all in one run:

* ``set``: ``set(key, bytes)``.
* ``get``: a value the caller owns (``bytes``): ``KVClient.get([k])[0]`` (openYuanrong's
  contract); for the native client ``bytes(StoreClient.get(k))``.
* ``get_zc``: a read-only view: ``KVClient.get_read_only_buffers([k])[0].immutable_data()``;
  for the native client ``StoreClient.get(k)`` (a zero-copy arena view).

openYuanrong runs in its own virtualenv (``--yr-python``, e.g. ``/tmp/yrvenv/bin/python``
with ``openyuanrong-datasystem==0.8.1``) against ``--yr-address``; without them only the
two kiloRL rows are measured.

    python benchmarks/yuanrong_bench.py [--yr-python /tmp/yrvenv/bin/python --yr-address 127.0.0.1:31601]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {"1KiB": 1 << 10, "1MiB": 1 << 20, "256MiB": 256 << 20}
REPS = {"1KiB": 300, "1MiB": 150, "256MiB": 8}
OPS = ("set", "get", "get_zc")


def _timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _kv_ops(kv, key: str, value: bytes) -> dict:
    """The three operations through an openYuanrong-style KVClient (ours or theirs)."""
    def get_zc():
        kv.get_read_only_buffers([key], 0)[0].immutable_data()
    return {"set": lambda: kv.set(key, value), "get": lambda: kv.get([key])[0], "get_zc": get_zc}


def _native_ops(client, key: str, value: bytes) -> dict:
    return {"set": lambda: client.set(key, value), "get": lambda: bytes(client.get(key)),
            "get_zc": lambda: client.get(key)}


def yr_child(address: str) -> None:
    """Runs inside openYuanrong's virtualenv: answers ``{"size", "op", "reps"}`` lines on
    stdin with the timings of that many calls (so the parent can interleave batches)."""
    from yr.datasystem import KVClient

    host, port = address.rsplit(":", 1)
    kv = KVClient(host, int(port))
    kv.init()
    ops = {}
    for line in sys.stdin:
        req = json.loads(line)
        name = req["size"]
        if name not in ops:
            ops[name] = _kv_ops(kv, f"bench_{name}", os.urandom(SIZES[name]))
            ops[name]["set"]()
        print(json.dumps(_timed(ops[name][req["op"]], req["reps"])), flush=True)
    if ops:
        kv.delete([f"bench_{name}" for name in ops])


class YrPeer:
    """The openYuanrong child process, driven one batch at a time."""

    def __init__(self, python: str, address: str):
        self.proc = subprocess.Popen([python, __file__, "--yr-child", "--yr-address", address],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, size: str, op: str, reps: int) -> list[float]:
        self.proc.stdin.write(json.dumps({"size": size, "op": op, "reps": reps}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        while line and not line.startswith("["):  # skip anything the SDK prints
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the openYuanrong child exited")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def _paired(a, b, reps: int) -> tuple[list[float], list[float]]:
    """Alternates calls of ``a`` and ``b`` so that drifting machine load hits both alike."""
    ta, tb = [], []
    for i in range(reps):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        (ta, tb)[i % 2].append(t1 - t0)
        (tb, ta)[i % 2].append(t2 - t1)
    return ta, tb


def start_kilorl_worker(run_dir: Path):
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
           "--run-dir", str(run_dir), "--token", "bench", "--shm-size", "1536MiB"]
    log = open(run_dir / "worker.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    info = run_dir / "worker.json"
    deadline = time.monotonic() + 60
    while not (info.exists() and json.loads(info.read_text()).get("pid") == proc.pid):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((run_dir / "worker.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc, json.loads(info.read_text())["port"]


def measure(rounds: int, peer: YrPeer | None) -> dict:
    """``samples[system][size][op]`` = call times in seconds, all systems in one run."""
    from kilorl.store import StoreClient
    from kilorl.store.yuanrong import KVClient

    samples: dict = {}

    def add(label: str, name: str, op: str, values: list[float]) -> None:
        samples.setdefault(label, {}).setdefault(name, {}).setdefault(op, []).extend(values)

    with tempfile.TemporaryDirectory(prefix="yr-bench-") as tmp:
        proc, port = start_kilorl_worker(Path(tmp))
        try:
            native = StoreClient(f"127.0.0.1:{port}", token="bench")
            kv = KVClient("127.0.0.1", port, token="bench")
            kv.init()
            for name, size in SIZES.items():
                value = os.urandom(size)
                n_ops, y_ops = _native_ops(native, f"n_{name}", value), _kv_ops(kv, f"y_{name}", value)
                n_ops["set"]()
                y_ops["set"]()
                for _ in range(rounds):
                    for op in OPS:
                        tn, ty = _paired(n_ops[op], y_ops[op], REPS[name])
                        add("native", name, op, tn)
                        add("kilorl.yuanrong", name, op, ty)
                        if peer is not None:
                            add("openyuanrong", name, op, peer.run(name, op, REPS[name]))
                native.delete(f"n_{name}", f"y_{name}")
            kv.close()
            native.close()
        finally:
            proc.terminate()
            proc.wait(30)
    return samples


def render(samples: dict) -> dict:
    """Prints the table; returns the medians."""
    med = {label: {n: {op: statistics.median(v) for op, v in ops.items()} for n, ops in by.items()}
           for label, by in samples.items()}
    # Pairs were measured back to back, so the median of per-pair ratios is the steadier figure.
    pair = {n: {op: statistics.median(y / x for x, y in zip(samples["native"][n][op], samples["kilorl.yuanrong"][n][op]))
                for op in OPS} for n in SIZES}
    has_yr = "openyuanrong" in med
    head = f"{'size':<8}{'op':<8}{'native µs':>12}{'yuanrong µs':>13}{'ratio':>8}"
    print(head + (f"{'openYuanrong µs':>17}{'yr/ours':>9}" if has_yr else ""))
    for name in SIZES:
        for op in OPS:
            n, y = med["native"][name][op], med["kilorl.yuanrong"][name][op]
            row = f"{name:<8}{op:<8}{n * 1e6:>12.1f}{y * 1e6:>13.1f}{pair[name][op]:>8.2f}"
            if has_yr:
                o = med["openyuanrong"][name][op]
                row += f"{o * 1e6:>17.1f}{o / y:>9.2f}"
            print(row)
    print("ratio = kilorl.store.yuanrong.KVClient / native StoreClient, median of back-to-back pairs (<= 1.10 is "
          "within 10%); yr/ours = openYuanrong 0.8.1 / kilorl.store.yuanrong, medians (>= 1: ours at least as fast)")
    return med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--yr-python", help="python of a virtualenv with openyuanrong-datasystem installed")
    ap.add_argument("--yr-address", default="127.0.0.1:31601", help="the openYuanrong worker (dscli start)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of every system")
    ap.add_argument("--json", type=Path, help="write the medians here")
    ap.add_argument("--yr-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.yr_child:
        yr_child(args.yr_address)
        return 0
    peer = YrPeer(args.yr_python, args.yr_address) if args.yr_python else None
    try:
        samples = measure(args.rounds, peer)
    finally:
        if peer is not None:
            peer.close()
    med = render(samples)
    if args.json:
        args.json.write_text(json.dumps(med, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
