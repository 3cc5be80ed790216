"""Micro-benchmarks of kilorl.comm: compression throughput, wire sizes, DDP overlap step time.

    python benchmarks/comm_bench.py                       # everything (a few minutes on 2 cores)
    python benchmarks/comm_bench.py --part sizes          # encoded bytes per density (exact, instant)
    python benchmarks/comm_bench.py --part throughput --numel 4194304
    python benchmarks/comm_bench.py --part overlap --runs 5 [--cases dense]

throughput: GB/s of fp32 gradient processed by each compressor on one core (compress =
select + encode; decode = decode + scatter into a dense tensor), median of ``--runs``.
overlap: step time (forward + backward + gradient sync + SGD step) of an MLP with two
1024-wide hidden layers on 2 gloo learners, ``overlap_compute_comm`` on and off (under DDP
and under BucketedAllReduce), then
each compression method (overlap on), alternating within the same two processes, median
of ``--runs`` rounds of ``--steps`` steps; on a loaded machine read the per-round ratios
to the dense overlapped step (each round runs every case back to back). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kilorl.comm import BucketedAllReduce, CompressionConfig, DistributedModel  # noqa: E402
from kilorl.comm import encoding as enc  # noqa: E402
from kilorl.comm.compressors import ThresholdTopK  # noqa: E402

DENSITIES = (0.001, 0.01, 0.05, 0.1, 0.125, 0.2, 0.3)


def sizes(numel: int) -> list[dict]:
    """Encoded message size over dense fp32, per density and index code (values bf16 / fp32)."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for p in DENSITIES:
        idx = torch.randperm(numel, generator=g)[: int(p * numel)].sort().values
        row: dict = {"density": p, "auto_picks": enc.choose_index_encoding(idx, numel)}
        for code in ("bitmap", "varint", "coo32"):
            for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
                row[f"{code}+{tag}"] = round(enc.encoded_bytes(idx, numel, dtype, code) / (4 * numel), 4)
        rows.append(row)
    return rows


def _median_s(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(numel: int, runs: int) -> list[dict]:
    torch.set_num_threads(1)
    grad = torch.randn(numel, generator=torch.Generator().manual_seed(1)) * 1e-3
    gb = 4 * numel / 1e9
    rows = [{"method": "bf16 cast (compress)", "GB/s": gb / _median_s(lambda: grad.to(torch.bfloat16), runs)}]
    for ratio in (0.3, 0.05):
        for code in ("bitmap", "varint", "coo32", "auto"):
            cfg = CompressionConfig(method="threshold_topk", threshold=1e-4, topk_ratio=ratio, index_encoding=code)
            comp = ThresholdTopK(cfg)
            box: dict = {}

            def compress(comp=comp, code=code, box=box):
                sel = comp.select(0, grad)
                box["msg"] = enc.encode(sel.indices, sel.values, numel, code)

            c_s = _median_s(compress, runs)

            def decompress(box=box):
                m = enc.decode(box["msg"])
                torch.zeros(numel).index_add_(0, m.indices, m.values.float())

            d_s = _median_s(decompress, runs)
            rows.append({"method": f"threshold_topk ratio={ratio} {code}", "compress GB/s": gb / c_s,
                         "decompress GB/s": gb / d_s, "wire ratio": box["msg"].numel() / (4 * numel)})
    sel_only = ThresholdTopK(CompressionConfig(method="threshold_topk", topk_ratio=0.3))
    rows.append({"method": "threshold_topk ratio=0.3 select only (topk + residual)",
                 "GB/s": gb / _median_s(lambda: sel_only.select(0, grad), runs)})
    rows.append({"method": "powersgd rank 4 (one 2048x2048 matrix, 1-rank group)", **_powersgd_rate(runs)})
    return [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def _powersgd_rate(runs: int) -> dict:
    """torch's PowerSGD hook end to end on a world of one (its all-reduces are then local)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

    from kilorl.comm.sync import FlatBucket

    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/store", rank=0, world_size=1)
        try:
            p = torch.nn.Parameter(torch.zeros(2048, 2048))
            buf = torch.randn(p.numel())
            state = PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=2)
            state.iter = 2
            s = _median_s(lambda: powerSGD_hook(state, FlatBucket(0, buf.clone(), [p], False)).wait(), runs)
        finally:
            dist.destroy_process_group()
    return {"GB/s": 4 * p.numel() / 1e9 / s}


# ---- overlap: 2 gloo learners ----

def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 512))


OVERLAP_CASES = {  # name -> (DDP or BucketedAllReduce, overlap_compute_comm, compression)
    "dense, overlap on": ("ddp", True, {}),
    "dense, overlap off": ("ddp", False, {}),
    "dense, BucketedAllReduce overlap on": ("sync", True, {}),
    "dense, BucketedAllReduce overlap off": ("sync", False, {}),
    "bf16, overlap on": ("ddp", True, {"method": "bf16"}),
    "powersgd r4, overlap on": ("ddp", True, {"method": "powersgd", "powersgd_rank": 4}),
    "threshold_topk 0.3, overlap on": ("ddp", True, {"method": "threshold_topk", "topk_ratio": 0.3}),
    "threshold_topk 0.05, overlap on": ("ddp", True, {"method": "threshold_topk", "topk_ratio": 0.05}),
}


def _overlap_worker(rank: int, port: int, steps: int, runs: int, bucket_mb: float, batch: int, out: str,
                    cases: list[str]) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    models = {}
    for name in cases:
        kind, overlap, comp = OVERLAP_CASES[name]
        net = _mlp()
        cfg = CompressionConfig(**comp)
        if kind == "ddp":
            dm = DistributedModel(net, compression=cfg, bucket_cap_mb=bucket_mb, overlap_compute_comm=overlap)
            models[name] = (dm, dm, torch.optim.SGD(net.parameters(), lr=1e-3))
        else:
            sync = BucketedAllReduce(net.parameters(), cfg, bucket_cap_mb=bucket_mb, overlap_compute_comm=overlap)
            models[name] = (net, sync, torch.optim.SGD(net.parameters(), lr=1e-3))
    x = torch.randn(batch, 512, generator=torch.Generator().manual_seed(rank))
    times: dict[str, list[float]] = {n: [] for n in models}
    stats: dict[str, dict] = {}

    def step(forward, sync, opt):
        opt.zero_grad()
        forward(x).pow(2).mean().backward()
        s = sync.synchronize()
        opt.step()
        return s

    for case in models.values():  # warm-up: DDP bucket rebuild, PowerSGD / top-k warm-up steps
        for _ in range(3):
            step(*case)
    for _ in range(runs):
        for name, case in models.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                s = step(*case)
            times[name].append((time.perf_counter() - t0) / steps)
            stats[name] = s.as_metrics()
    if rank == 0:
        n_params = sum(p.numel() for p in _mlp().parameters())
        base = times["dense, overlap on"]
        rows = [{"case": n, "step ms (median)": round(1e3 * statistics.median(t), 2),
                 "vs dense overlap on (median of per-round ratios)": round(
                     statistics.median(v / b for v, b in zip(t, base)), 3),
                 "step ms (all runs)": [round(1e3 * v, 1) for v in t],
                 "comm_ratio": round(stats[n]["comm_ratio"], 4), "compress_s": round(stats[n]["compress_s"], 4)}
                for n, t in times.items()]
        Path(out).write_text(json.dumps({"params": n_params, "bucket_cap_mb": bucket_mb, "batch": batch, "rows": rows}))
    dist.destroy_process_group()


def overlap(steps: int, runs: int, bucket_mb: float, batch: int, only: str | None = None) -> dict:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "overlap.json")
        cases = [n for n in OVERLAP_CASES if n == "dense, overlap on" or not only or any(w in n for w in only.split(","))]
        mp.start_processes(_overlap_worker, args=(port, steps, runs, bucket_mb, batch, out, cases), nprocs=2,
                           start_method="spawn")
        return json.loads(Path(out).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["sizes", "throughput", "overlap", "all"], default="all")
    ap.add_argument("--numel", type=int, default=4 * 2**20, help="gradient entries for sizes/throughput (default 4M = 16 MB)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="overlap: steps per timed round")
    ap.add_argument("--bucket-mb", type=float, default=2.0, help="overlap: DDP bucket_cap_mb (the MLP is ~8.4 MB)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cases", help="overlap: only cases containing one of these comma-separated words (e.g. dense)")
    args = ap.parse_args()
    report: dict = {"torch": torch.__version__, "cpus": os.cpu_count(), "numel": args.numel}
    if args.part in ("sizes", "all"):
        report["sizes"] = sizes(args.numel)
    if args.part in ("throughput", "all"):
        report["throughput"] = throughput(args.numel, args.runs)
    if args.part in ("overlap", "all"):
        report["overlap"] = overlap(args.steps, args.runs, args.bucket_mb, args.batch, args.cases)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
