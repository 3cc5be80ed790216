"""Leak detection on real processes: detection delay for injected leaks, false alarms on healthy ones.

    python benchmarks/leak_bench.py --rates 1,2,5 --repeats 3 --healthy-s 400
    python benchmarks/leak_bench.py --store-s 300     # a store worker under load, no leaks
    python benchmarks/leak_bench.py --rates 20,50,100 --leak-after-s 5 --headroom-mib 1600 \
        --healthy-headroom-mib 400 --healthy-s 300     # steep leaks against a limit

With ``--headroom-mib`` each leaker has a limit (its RSS at launch plus that much, as a
2 GiB budget leaves a 400 MiB role), so the steep-leak test (``leak.fast_max_ttl_s``) can
act, and ``margin_s`` says how many seconds of its leak were left to the limit when it
was flagged; a leaker that reaches its limit unflagged is counted and killed.
``--healthy-headroom-mib`` gives the healthy children a limit that close too.

With ``--store-s`` the healthy process watched is a real store worker (``kilorl store
start``, 256 MiB arena) driven for that long by a loader child doing what the store's
benchmark and a training run do: objects of 1 KiB-8 MiB set, read whole and by byte range,
deleted or overwritten, with the arena filling and recycling; versioned publishes of a
policy (``publish``, ``get_version``) with older versions reclaimed; a stream produced and
consumed. The worker's RSS includes the arena pages it touched, so the fill-up phase is
exactly what a trend detector must not call a leak.

Each leaker is a real child process that starts leaking (written, hence resident, memory)
``--leak-after-s`` seconds after it starts; each healthy child churns memory for the whole
run in one of three patterns (random allocate/free, a GC-like sawtooth, one-off step
allocations). The parent samples every child's RSS once per second with psutil and runs
one :class:`kilorl.monitor.LeakDetector` (default configuration) per child, exactly as a
role's reporter does. All children run side by side, so the machine's load is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kilorl.monitor import LeakDetector  # noqa: E402

MiB = 2**20


def worker(kind: str, rate: float, leak_after_s: float, seed: int) -> None:
    """The child: behaves as told until killed; prints the monotonic time its leak starts."""
    rng = random.Random(seed)
    held: list[bytearray] = []
    t0 = last = time.monotonic()
    started = False
    cache: bytearray | None = None
    saw: list[bytearray] = []
    while True:
        now = time.monotonic()
        if kind == "leak" and now - t0 >= leak_after_s:
            if not started:
                print(json.dumps({"leak_start": now}), flush=True)
                started = True
            held.append(bytearray(b"\x01") * int(rate * MiB * (now - last)))
        elif kind == "churn":
            scratch = [bytearray(b"\x02") * int(rng.uniform(1, 40) * MiB) for _ in range(2)]
            del scratch
        elif kind == "sawtooth":  # grows 8 MiB/s for 10 s, then everything is released
            saw.append(bytearray(b"\x03") * int(8 * MiB * (now - last)))
            if len(saw) > 50:
                saw.clear()
        elif kind == "steps" and cache is None and now - t0 > rng.uniform(30, 200):
            cache = bytearray(b"\x04") * (200 * MiB)  # a cache filled once, then kept
        last = now
        time.sleep(0.2)


def store_load(address: str, token: str, seed: int) -> None:
    """The loader child: store-benchmark-like traffic against one worker until killed."""
    from kilorl.store import StoreClient

    rng = random.Random(seed)
    c = StoreClient(address, token=token)
    prod, cons = c.producer("soak", capacity=64), c.consumer("soak", "g")
    policy = bytes(40_000)
    version = 0
    while True:
        size = int(2 ** rng.uniform(10, 23))  # 1 KiB .. 8 MiB, log-uniform
        key = f"obj/{rng.randrange(48)}"
        c.set(key, bytes(size))
        got = c.get(key)
        assert len(got) == size
        if size > 4096:
            assert len(c.get_range(key, size // 4, 1024)) == 1024
        if rng.random() < 0.3:
            c.delete(key)
        version = c.publish("policy", policy, version + 1)
        c.get_version("policy", version)
        prod.send(bytes(rng.randrange(64, 8192)))
        msg = cons.receive(timeout=1.0)
        if msg is not None:
            cons.ack(msg.id)
        c.flush_releases()
        c.incr("soak/rounds")
        time.sleep(0.002)


def store_soak(duration_s: float) -> dict:
    """Watch a loaded store worker's RSS for ``duration_s`` with one default LeakDetector."""
    import secrets
    import tempfile

    from kilorl.roles.store_node import WorkerProcess

    token = secrets.token_hex(16)
    worker = WorkerProcess("127.0.0.1", token, "256MiB", 3, None, "soak")
    loader = None
    try:
        address = worker.wait_ready()
        loader = subprocess.Popen([sys.executable, __file__, "--store-loader", address, "--token", token],
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=tempfile.gettempdir())
        watched = {"store worker": psutil.Process(worker.pid()), "store loader": psutil.Process(loader.pid)}
        det = {name: LeakDetector() for name in watched}
        alarms = dict.fromkeys(watched, 0)
        flagged = dict.fromkeys(watched, 0)
        was = dict.fromkeys(watched, False)
        rss = {name: [] for name in watched}
        t0 = next_t = time.monotonic()
        while time.monotonic() - t0 < duration_s:
            if loader.poll() is not None:
                raise RuntimeError(f"the store loader exited with {loader.returncode}")
            now = time.monotonic()
            for name, proc in watched.items():
                value = float(proc.memory_info().rss)
                rss[name].append(value)
                v = det[name].update(now, value, None)
                alarms[name] += int(v.suspected and not was[name])
                flagged[name] += int(v.suspected)
                was[name] = v.suspected
            next_t += 1.0
            time.sleep(max(0.0, next_t - time.monotonic()))
        from kilorl.store import StoreClient

        rounds = StoreClient(address, token=token).incr("soak/rounds", 0)
        per_role = {name: {"observed_s": len(rss[name]), "alarms": alarms[name], "flagged_s": flagged[name],
                       "rss_min_mib": round(min(rss[name]) / MiB, 1), "rss_max_mib": round(max(rss[name]) / MiB, 1)}
                for name in watched}
        return {"loader_rounds_per_s": round(rounds / duration_s, 1), **per_role}
    finally:
        if loader is not None:
            loader.kill()
            loader.wait()
        worker.stop()


def spawn(kind: str, rate: float, leak_after_s: float, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", kind, "--rate", str(rate), "--leak-after-s", str(leak_after_s),
         "--seed", str(seed)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def run(rates: list[float], repeats: int, healthy_s: float, leak_after_s: float, max_wait_s: float,
        headroom_mib: float | None = None, healthy_headroom_mib: float | None = None) -> dict:
    kids: list[dict] = []
    for rate in rates:
        for r in range(repeats):
            kids.append({"kind": "leak", "rate": rate, "proc": spawn("leak", rate, leak_after_s, r)})
    for i, kind in enumerate(("churn", "sawtooth", "steps")):
        kids.append({"kind": kind, "rate": 0.0, "proc": spawn(kind, 0.0, 0.0, i)})
    for k in kids:
        k.update(ps=psutil.Process(k["proc"].pid), det=LeakDetector(), flagged_at=None, alarms=0, flagged_s=0,
                 was=False, leak_start=None, done=False, samples=0, limit=None, fast=None, rss_at_flag=None,
                 over_limit=False, slope=None, fast_alarms=0)
        room = headroom_mib if k["kind"] == "leak" else healthy_headroom_mib
        if room is not None:  # the role's budget: its RSS at launch plus this much (the steep-leak test needs one)
            k["limit"] = float(k["ps"].memory_info().rss) + room * MiB
        if k["kind"] == "leak":
            os.set_blocking(k["proc"].stdout.fileno(), False)
    t_begin = time.monotonic()
    tick = 1.0
    next_t = t_begin
    while True:
        now = time.monotonic()
        for k in kids:
            if k["done"]:
                continue
            if k["kind"] == "leak" and k["leak_start"] is None:
                line = k["proc"].stdout.readline()
                if line:
                    k["leak_start"] = json.loads(line)["leak_start"]
            rss = float(k["ps"].memory_info().rss)
            v = k["det"].update(now, rss, k["limit"])
            k["samples"] += 1
            if v.suspected and not k["was"]:
                k["alarms"] += 1
                k["fast_alarms"] += int(v.fast)
                if k["flagged_at"] is None:
                    k["flagged_at"], k["fast"], k["rss_at_flag"], k["slope"] = now, v.fast, rss, v.slope_bytes_per_s
            if k["limit"] is not None and rss >= k["limit"] and k["flagged_at"] is None:
                k["over_limit"] = True  # reached its limit unflagged: too late, and no point leaking on
            k["flagged_s"] += int(v.suspected)
            k["was"] = v.suspected
            if k["kind"] == "leak" and (k["flagged_at"] is not None or k["over_limit"] or
                                       (k["leak_start"] and now - k["leak_start"] > max_wait_s)):
                k["done"] = True
                k["proc"].kill()
        if now - t_begin >= healthy_s and all(k["done"] for k in kids if k["kind"] == "leak"):
            break
        next_t += tick
        time.sleep(max(0.0, next_t - time.monotonic()))
    for k in kids:
        k["proc"].kill()
        k["proc"].wait()
    out: dict = {"leaks": {}, "healthy": {}, "healthy_s": healthy_s}
    for rate in rates:
        ks = [k for k in kids if k["kind"] == "leak" and k["rate"] == rate]
        delays = [k["flagged_at"] - k["leak_start"] for k in ks if k["flagged_at"] and k["leak_start"]]
        early = [k for k in ks if k["flagged_at"] and k["leak_start"] and k["flagged_at"] < k["leak_start"]]
        out["leaks"][rate] = {"delays_s": [round(d, 1) for d in delays], "median_s": round(statistics.median(delays), 1)
                              if delays else None, "missed": len(ks) - len(delays), "flagged_before_leak": len(early),
                              "fast": [k["fast"] for k in ks if k["flagged_at"]],
                              # what the child achieved on a loaded machine (the nominal rate is an upper bound)
                              "slope_at_flag_mib_s": [round(k["slope"] / MiB, 1) for k in ks if k["flagged_at"]],
                              "reached_limit_unflagged": sum(k["over_limit"] for k in ks)}
        if headroom_mib is not None:  # how far from the limit each was when flagged, in seconds of its leak
            out["leaks"][rate]["margin_s"] = [round((k["limit"] - k["rss_at_flag"]) / (rate * MiB), 1)
                                              for k in ks if k["flagged_at"]]  # at the nominal rate: a lower bound
    for k in kids:
        if k["kind"] != "leak":
            out["healthy"][k["kind"]] = {"observed_s": k["samples"], "alarms": k["alarms"], "flagged_s": k["flagged_s"],
                                         "alarms_by_the_steep_leak_test": k["fast_alarms"]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="1,2,5", help="leak rates in MiB/s")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--healthy-s", type=float, default=400.0, help="how long the healthy processes are watched")
    p.add_argument("--leak-after-s", type=float, default=90.0, help="leaks start once the window is full of steady samples")
    p.add_argument("--max-wait-s", type=float, default=120.0, help="a leak not flagged by then counts as missed")
    p.add_argument("--headroom-mib", type=float, help="leakers' limit: RSS at launch + this (default: no limit)")
    p.add_argument("--healthy-headroom-mib", type=float, help="healthy children's limit: RSS at launch + this")
    p.add_argument("--worker", choices=["leak", "churn", "sawtooth", "steps"], help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--store-s", type=float, help="instead: watch a store worker under load for this long")
    p.add_argument("--store-loader", help=argparse.SUPPRESS)
    p.add_argument("--token", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker, a.rate, a.leak_after_s, a.seed)
        return
    if a.store_loader:
        store_load(a.store_loader, a.token, a.seed)
        return
    if a.store_s:
        print(json.dumps({"store_soak_s": a.store_s, **store_soak(a.store_s)}, indent=1))
        return
    res = run([float(r) for r in a.rates.split(",")], a.repeats, a.healthy_s, a.leak_after_s, a.max_wait_s,
              a.headroom_mib, a.healthy_headroom_mib)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
