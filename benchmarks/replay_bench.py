"""Replay tables on store workers vs TorchRL's buffers, side by side in one run.

For CartPole-sized transitions (obs 4 × f32, action i64, reward f32, next_obs 4 × f32,
discount f32: 48 bytes), with ``--frames`` 84×84 uint8 frames stacked 4 per row
(synthetic Pong-like frames: a flat court, two paddles and a ball that move) and with
``--pong-rows N`` DQN transitions of real Pong (``kilorl.envs.atari:make_atari``, random play:
obs and next_obs stacks of 4, stored by kiloRL as single frames, ``frame_stack``), it fills each
buffer to ``--rows`` in chunks of ``--chunk`` rows, then draws ``--samples`` batches of
``--batch`` rows, uniform and prioritized, and reports inserts/s, sampled transitions/s,
p50/p99 sample latency and stored bytes per transition.

kiloRL: real ``kilorl store start`` workers (1 and 2 shards, a ``ShardedTable`` over two);
each sample is one request per shard, over the worker's Unix socket. TorchRL:
``TensorDictReplayBuffer`` with ``LazyTensorStorage`` and ``LazyMemmapStorage``, in this
process (no socket, no copy out of the process: the lower bound a service must approach).

    python benchmarks/replay_bench.py [--rows 1000000] [--batch 256] [--samples 2000] [--frames]
                                      [--pong-rows 10000 --pong-chunk-length 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kilorl.store import StoreClient
from kilorl.store.client.replay_shards import ShardedTable
from kilorl.store.replay.spec import make_spec

CARTPOLE = {"obs": ((4,), np.float32), "action": ((), np.int64), "reward": ((), np.float32),
            "next_obs": ((4,), np.float32), "discount": ((), np.float32)}
FRAMES = {"obs": ((4, 84, 84), np.uint8), "action": ((), np.int64), "reward": ((), np.float32),
          "discount": ((), np.float32)}


def cartpole_chunk(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    obs = rng.standard_normal((n + 1, 4)).astype(np.float32)
    return {"obs": obs[:-1], "action": rng.integers(0, 2, n), "reward": np.ones(n, np.float32),
            "next_obs": obs[1:], "discount": np.full(n, 0.99, np.float32)}


class PongLike:
    """Frames of a Pong-like court: grey background, two paddles, a ball; stacks of 4."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self.frames = [self._frame() for _ in range(4)]

    def _frame(self) -> np.ndarray:
        f = np.full((84, 84), 87, np.uint8)
        f[:6], f[-6:] = 236, 236  # walls
        t = self.t
        self.t += 1
        p1, p2 = 20 + int(20 * np.sin(t / 9)), 20 + int(20 * np.cos(t / 7))
        f[p1:p1 + 10, 8:10] = 148
        f[p2:p2 + 10, 74:76] = 148
        bx, by = 10 + (3 * t) % 64, 8 + (2 * t) % 68
        f[by:by + 2, bx:bx + 2] = 236
        return f

    def chunk(self, n: int) -> dict[str, np.ndarray]:
        obs = np.empty((n, 4, 84, 84), np.uint8)
        for i in range(n):
            self.frames = self.frames[1:] + [self._frame()]
            obs[i] = np.stack(self.frames)
        return {"obs": obs, "action": self.rng.integers(0, 6, n), "reward": np.zeros(n, np.float32),
                "discount": np.full(n, 0.99, np.float32)}


PONG = {"obs": ((4, 84, 84), np.uint8), "action": ((), np.int64), "reward": ((), np.float32),
        "next_obs": ((4, 84, 84), np.uint8), "discount": ((), np.float32)}


class RealPong:
    """DQN transitions of real Pong played at random (n-step 1), in chunks of consecutive steps
    of one env (as DQN's adder inserts them for a frame-stack table); every chunk distinct."""

    def __init__(self, rows: int, chunk: int, seed: int = 0) -> None:
        from kilorl.envs.atari import make_atari

        env = make_atari("Pong", frame_stack=4)
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed)
        self.chunks: list[dict[str, np.ndarray]] = []
        for _ in range(rows // chunk):
            c = {k: np.empty((chunk, *shape), dtype) for k, (shape, dtype) in PONG.items()}
            for i in range(chunk):
                a = int(rng.integers(env.action_space.n))
                nxt, r, term, trunc, _ = env.step(a)
                c["obs"][i], c["action"][i], c["reward"][i], c["next_obs"][i] = obs, a, r, nxt
                c["discount"][i] = 0.0 if term else 0.99
                obs = env.reset()[0] if term or trunc else nxt
            self.chunks.append(c)
        env.close()
        self.i = 0

    def chunk(self, n: int) -> dict[str, np.ndarray]:
        c = self.chunks[self.i % len(self.chunks)]
        self.i += 1
        return c


def start_worker(base: Path, token: str) -> tuple[subprocess.Popen, str]:
    run = base / f"w-{secrets.token_hex(3)}"
    run.mkdir()
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
           "--run-dir", str(run), "--shm-size", "64MiB", "--token", token]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(run / "log", "wb"))
    deadline = time.monotonic() + 60
    while not (run / "worker.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"store worker did not start: {(run / 'log').read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, f"127.0.0.1:{json.loads((run / 'worker.json').read_text())['port']}"


WORKER_PIDS: dict[str, int] = {}
"""address -> pid of the benchmark's store workers (their CPU seconds are read from /proc)."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(addresses: list[str], run: Any) -> dict[str, Any]:
    """``run()``'s result with the CPU seconds the workers and this process (the client) spent
    in it: rates per CPU second do not depend on how much of the machine others take."""
    pids = [WORKER_PIDS[a] for a in addresses if a in WORKER_PIDS]
    w0, c0 = sum(cpu_seconds(p) for p in pids), time.process_time()
    out = run()
    out["worker_cpu_s"] = sum(cpu_seconds(p) for p in pids) - w0
    out["client_cpu_s"] = time.process_time() - c0
    return out


def timed_fill(insert: Any, make_chunk: Any, rows: int, chunk: int, pool_size: int = 8) -> float:
    """Rows inserted per second (chunks made before the clock starts, a pool reused)."""
    pool = [make_chunk(chunk) for _ in range(pool_size)]
    t0 = time.perf_counter()
    for i in range(rows // chunk):
        insert(pool[i % len(pool)])
    return (rows // chunk) * chunk / (time.perf_counter() - t0)


def timed_samples(sample: Any, batch: int, n: int) -> dict[str, float]:
    sample()  # warm-up
    lat = np.empty(n)
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        sample()
        lat[i] = time.perf_counter() - s
    wall = time.perf_counter() - t0
    return {"samples_per_s": n * batch / wall, "p50_ms": float(np.percentile(lat, 50) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3)}


def bench_kilorl(addresses: list[str], token: str, kind: str, schema: dict, make_chunk: Any, args: Any,
                 sampler: str, compression: str) -> dict[str, Any]:
    clients = [StoreClient(a, token=token) for a in addresses]
    name = f"bench-{secrets.token_hex(3)}"
    stacked = getattr(args, "stacked", ())
    spec = make_spec(name, schema, args.rows, compression=compression, sampler=sampler,
                     chunk_length=getattr(args, "chunk_length", 16), stacked=stacked)
    table = ShardedTable([c.replay_tables for c in clients], spec, seed=1)
    try:
        ins = timed_fill(lambda c: table.insert(c), make_chunk, args.rows, args.chunk, getattr(args, "pool", 8))
        out = with_cpu(addresses, lambda: timed_samples(lambda: table.sample(args.batch), args.batch, args.samples))
        rows = (args.samples + 1) * args.batch  # with the warm-up sample
        out["rows_per_worker_cpu_s"] = rows / max(out["worker_cpu_s"], 1e-9)
        out["rows_per_cpu_s"] = rows / max(out["worker_cpu_s"] + out["client_cpu_s"], 1e-9)
        if sampler == "prioritized":  # the learner's round trip: sample, then new priorities
            def sample_and_update() -> None:
                s = table.sample(args.batch)
                table.update_priorities(s.shards, s.ids, np.random.random(s.ids.size) + 0.1)
            out["with_update"] = timed_samples(sample_and_update, args.batch, args.samples // 2)
        info = table.info()
        return {"impl": f"kilorl {len(addresses)} shard(s)", "rows": kind, "sampler": sampler,
                "compression": compression, "inserts_per_s": ins, **out,
                "bytes_per_transition": info["stored_bytes"] / max(1, info["rows"]),
                "raw_bytes_per_transition": info["raw_bytes"] / max(1, info["rows"])}
    finally:
        for c in clients:
            c.replay_tables.drop(name)
            c.close()
        table.close()


def bench_torchrl(storage_kind: str, kind: str, make_chunk: Any, args: Any, sampler: str,
                  tmp: Path) -> dict[str, Any]:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler

    storage = (LazyTensorStorage(args.rows) if storage_kind == "LazyTensorStorage"
               else LazyMemmapStorage(args.rows, scratch_dir=str(tmp / f"mm-{secrets.token_hex(3)}")))
    smp = PrioritizedSampler(args.rows, alpha=0.6, beta=0.4) if sampler == "prioritized" else RandomSampler()
    rb = TensorDictReplayBuffer(storage=storage, sampler=smp, batch_size=args.batch)

    def td(chunk: dict[str, np.ndarray]) -> TensorDict:
        return TensorDict({k: torch.from_numpy(v) for k, v in chunk.items()}, batch_size=[len(chunk["action"])])

    ins = timed_fill(lambda c: rb.extend(c), lambda n: td(make_chunk(n)), args.rows, args.chunk,
                     getattr(args, "pool", 8))
    out = with_cpu([], lambda: timed_samples(lambda: rb.sample(), args.batch, args.samples))
    out["rows_per_cpu_s"] = (args.samples + 1) * args.batch / max(out["client_cpu_s"], 1e-9)
    if sampler == "prioritized":
        def sample_and_update() -> None:
            s = rb.sample()
            rb.update_priority(s["index"], torch.rand(args.batch) + 0.1)
        out["with_update"] = timed_samples(sample_and_update, args.batch, args.samples // 2)
    nbytes = sum(v.numel() * v.element_size() for v in storage._storage.values(True, True))
    return {"impl": f"torchrl {storage_kind}", "rows": kind, "sampler": sampler, "compression": "none",
            "inserts_per_s": ins, **out, "bytes_per_transition": nbytes / args.rows,
            "raw_bytes_per_transition": nbytes / args.rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--frame-rows", type=int, default=20_000, help="rows of the frames case")
    ap.add_argument("--frame-chunk", type=int, default=1, help="chunk_length of the frames table")
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--frames", action="store_true", help="also the 84×84×4 uint8 frame rows")
    ap.add_argument("--pong-rows", type=int, default=0, help="rows of real Pong transitions (0: none)")
    ap.add_argument("--pong-chunk-length", type=int, default=32, help="chunk_length of the Pong table")
    ap.add_argument("--pong-samples", type=int, default=100, help="batches sampled from the Pong table")
    ap.add_argument("--cartpole-samplers", default="uniform,prioritized")
    ap.add_argument("--no-torchrl", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    token = secrets.token_hex(8)
    procs, addrs = [], []
    results: list[dict[str, Any]] = []
    try:
        for _ in range(2):
            p, a = start_worker(tmp, token)
            procs.append(p)
            addrs.append(a)
            WORKER_PIDS[a] = p.pid
        rng = np.random.default_rng(0)
        cases = [("cartpole", CARTPOLE, lambda n: cartpole_chunk(rng, n), args, ("none", "zstd"))]
        if args.frames:
            fargs = argparse.Namespace(**{**vars(args), "rows": args.frame_rows, "chunk": 64,
                                          "chunk_length": args.frame_chunk,
                                          "samples": max(50, args.samples // 10)})
            pong = PongLike(0)
            cases.append(("frames 4x84x84", FRAMES, pong.chunk, fargs, ("zstd",)))
        if args.pong_rows:
            chunk = args.pong_chunk_length
            real = RealPong(args.pong_rows, chunk)
            pargs = argparse.Namespace(**{**vars(args), "rows": len(real.chunks) * chunk, "chunk": chunk,
                                          "chunk_length": chunk, "samples": args.pong_samples,
                                          "stacked": ("obs", "next_obs"), "pool": len(real.chunks)})
            cases.append(("pong (real, stacks of 4)", PONG, real.chunk, pargs, ("zstd",)))
        for kind, schema, make_chunk, a, codecs in cases:
            samplers = args.cartpole_samplers.split(",") if kind == "cartpole" else ("uniform",)
            for sampler in samplers:
                for shards in (addrs[:1], addrs):
                    for codec_name in codecs:
                        results.append(bench_kilorl(shards, token, kind, schema, make_chunk, a, sampler, codec_name))
                        print(json.dumps(results[-1]), flush=True)
                if not args.no_torchrl:
                    for st in ("LazyTensorStorage", "LazyMemmapStorage"):
                        try:
                            results.append(bench_torchrl(st, kind, make_chunk, a, sampler, tmp))
                        except RuntimeError as exc:  # e.g. its C++ sum tree built for another torch
                            print(f"torchrl {st} {sampler}: unavailable here ({exc})", flush=True)
                            continue
                        print(json.dumps(results[-1]), flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmachine: {platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()}")
    print("| rows | impl | sampler | codec | inserts/s | sampled rows/s | p50 ms | p99 ms "
          "| with priority update: rows/s | sampled rows per worker CPU s (per worker + client CPU s; "
          "torchrl: per CPU s of its process) "
          "| bytes/row (raw) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        upd = f"{r['with_update']['samples_per_s']:,.0f}" if "with_update" in r else ""
        cpu = ""  # below half a CPU second the clock ticks (10 ms) make the rate meaningless
        if r.get("worker_cpu_s", 0) >= 0.5:
            cpu = f"{r['rows_per_worker_cpu_s']:,.0f} ({r['rows_per_cpu_s']:,.0f})"
        elif "rows_per_worker_cpu_s" not in r and r.get("client_cpu_s", 0) >= 0.5:
            cpu = f"– ({r['rows_per_cpu_s']:,.0f})"
        print(f"| {r['rows']} | {r['impl']} | {r['sampler']} | {r['compression']} | {r['inserts_per_s']:,.0f} | "
              f"{r['samples_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {upd} | {cpu} | "
              f"{r['bytes_per_transition']:.1f} ({r['raw_bytes_per_transition']:.0f}) |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
