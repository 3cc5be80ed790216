"""Parameter sync: publish -> every actor holds the new version in its model.

Side by side in one run, for a small (10K-parameter) and a large (25M-parameter, 100 MB)
policy and ``--actors`` Ray actors on this node:

- **kiloRL store, copied in**: the learner publishes through ``StoreParameterStore`` (shards
  + commit record on a real store worker); each actor blocks in ``wait``, then ``fetch_into``
  copies the version's bytes into the tensors of the model it keeps (here the model is a dict
  of tensors): the same tensors every version, no new ones.
- **kiloRL store, zero-copy views**: the same, but ``fetch(..., share=True)`` gives new tensors
  that are views of the store's memory (for a small policy, a private copy from the version
  board), and the model takes them as its tensors.

kiloRL's actors copy in up to ``kilorl.roles.env_runner.COPY_IN_MAX_BYTES`` (1 MiB) and take views
above it; the "speed vs Ray" line compares Ray with what the actors do at that size.
- **Ray broadcast**, as RLlib syncs weights: ``ray.put`` once, every actor's method gets the
  reference (``ray.get``) and calls ``load_state_dict``.
- **memcpy floor**: one copy of the parameters' bytes in one process.

Latency of one (version, actor) pair = the actor's ``time.monotonic()`` once the weights are in
its model minus the driver's just before it starts publishing (CLOCK_MONOTONIC is one clock
for every process of a Linux machine). Versions are paced: the next is published only after
every actor has acknowledged the previous one, so each sample is one isolated sync.

With ``--raylets N`` (N >= 2) the actors are spread over N raylets of one
``ray.cluster_utils.Cluster`` (actor ``i`` on raylet ``i % N``, Ray's broadcast readers too),
each raylet with its own store worker (the first ``--head``, the others ``--join`` it): the
learner (the driver, on the first raylet) writes shard ``k`` to raylet ``k % N``'s worker
and the commit record to its own (``shard_homes``), and each actor reads from its own
raylet's worker, which pulls the shards it lacks once for its raylet's actors.

With ``--runs R`` the whole comparison runs ``R`` times (fresh actors each time; the two
kiloRL ways take turns going first) and every cell is the median over the runs of that
run's p50 / p99.

    python benchmarks/param_sync_bench.py [--actors 4] [--small-versions 200] [--large-versions 15] [--runs 3]
                                          [--raylets 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = {
    # name -> (tensor shapes): ~10K and 25M float32 parameters
    "small (10K params, 40 KB)": [(64, 128), (128,), (128, 12), (12,), (1, 128)],
    "large (25M params, 100 MB)": [(5000, 1000)] * 5,
}


def make_params(shapes: list[tuple[int, ...]], fill: float) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.full(s, fill) for i, s in enumerate(shapes)}


def start_worker(tmp: Path, shm: str, token: str | None = None, mesh: list[str] = (),
                 name: str = "worker") -> tuple[subprocess.Popen, str, str]:
    """A store worker; ``mesh``: its ``--head`` / ``--join ADDR`` / ``--cluster-name`` options."""
    from kilorl.store import StoreClient

    run_dir = tmp / name
    token = token or secrets.token_hex(16)
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
           "--run-dir", str(run_dir), "--shm-size", shm, "--keep-versions", "2", "--token", token, *mesh]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info = run_dir / "worker.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"store worker exited with {proc.returncode}")
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("pid") == proc.pid:
                address = f"127.0.0.1:{data['port']}"
                with StoreClient(address, token=token) as c:  # measure once every arena page is pre-faulted
                    while not c.stats()["arena_populated"] and time.monotonic() < deadline:
                        time.sleep(0.05)
                return proc, address, token
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("store worker did not start in 60 s")


def percentiles(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)), "n": len(xs)}


def median_over_runs(runs: list[dict[str, dict[str, dict[str, float]]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per policy and system, the median over runs of each run's p50 and p99."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for label, rows in runs[0].items():
        out[label] = {system: {"p50_ms": float(np.median([r[label][system]["p50_ms"] for r in runs])),
                               "p99_ms": float(np.median([r[label][system]["p99_ms"] for r in runs])),
                               "n": rows[system]["n"]} for system in rows}
    return out


STAGES = ("publish returns", "actor has the bytes", "bytes in the model")
COPIED, VIEWS = "kiloRL store, copied in", "kiloRL store, zero-copy views"


def actors_share(shapes: list[tuple[int, ...]]) -> bool:
    """Whether kiloRL's actors take a policy of these float32 shapes as views (else: copy in)."""
    from kilorl.roles.env_runner import COPY_IN_MAX_BYTES

    return sum(4 * int(np.prod(s)) for s in shapes) > COPY_IN_MAX_BYTES


class ReaderFailed(RuntimeError):
    """A reader raised, died or missed the deadline: the run stops instead of waiting on its ack."""


class Acks:
    """Pacing: every reader says it has version v by writing one byte to a FIFO the driver reads.

    Scaffolding that costs the machine next to nothing (a store publish per ack would cost the
    worker and the two cores more than the sync being measured). A reader that fails never
    acks, and its open end of the FIFO keeps the driver's read from seeing EOF: ``wait`` checks
    the readers between acks and gives up at a deadline, so a failing reader raises its own
    error here instead of hanging the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for a writer

    def wait(self, n: int, deadline_s: float, check: Callable[[], None], what: str = "",
             check_every_s: float = 1.0) -> None:
        """Take ``n`` acks within ``deadline_s``; ``check()`` (called at least every
        ``check_every_s`` while no ack comes) raises if a reader has failed."""
        import select

        got, deadline = 0, time.monotonic() + deadline_s
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                check()
                raise ReaderFailed(f"{got}/{n} readers acknowledged {what} within --sync-timeout-s "
                                   f"{deadline_s:g} s; the others neither acked nor failed")
            ready, _, _ = select.select([self.fd], [], [], min(left, check_every_s))
            if not ready:
                check()
                continue
            try:
                data = os.read(self.fd, n - got)
            except BlockingIOError:
                continue
            if not data:  # every writer closed its end: the readers are gone
                check()
                raise ReaderFailed(f"every reader closed the ack pipe after {got}/{n} acks of {what}")
            got += len(data)

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink()


def readers_alive(ray, done: list) -> Callable[[], None]:
    """A ``check`` for ``Acks.wait``: a reader's ``listen`` that returned early raised (or its
    process died); ``ray.get`` re-raises that error here."""

    def check() -> None:
        finished, _ = ray.wait(done, num_returns=len(done), timeout=0)
        for ref in finished:
            ray.get(ref)  # raises the reader's error
            raise ReaderFailed("a reader returned before every version was published")

    return check


def bench_store(ray, actors_n: int, shapes, versions: int, address: str, token: str | None, shards: int,
                name: str, share: bool, timeout_s: float,
                nodes: Nodes | None = None) -> tuple[list[float], dict[str, float]]:
    """Latencies of every (version, actor), and the median time from the publish's start to
    each stage (``STAGES``): the publish call returning (driver), the actor's ``wait``
    returning with the version's bytes, the bytes copied into its model. ``timeout_s`` bounds
    every step that waits on another process (a reader's ``wait``, the driver's acks, start-up)."""
    from kilorl.params.store_backed import StoreParameterStore
    from kilorl.store import StoreClient

    homes = nodes.homes(shards, token) if nodes else []

    @ray.remote(num_cpus=0)
    class Reader:
        def __init__(self, rank: int, fifo: str, at: str) -> None:
            self.rank = rank
            self.model = make_params(shapes, 0.0)
            self.ps = StoreParameterStore(lambda: StoreClient(at, token=token), num_shards=shards, shard_homes=homes)
            self.ack = os.open(fifo, os.O_WRONLY)

        def listen(self, versions: int) -> list[tuple[float, float]]:
            got = []
            for v in range(1, versions + 1):
                self.ps.wait(name, v, timeout=timeout_s)
                woke = time.monotonic()
                if share:  # the model takes the store's memory as its parameters
                    _, self.model = self.ps.fetch(name, v, list(self.model), share=True)
                else:
                    self.ps.fetch_into(name, self.model, version=v)
                got.append((woke, time.monotonic()))
                assert float(self.model["t0"][0].reshape(-1)[0]) == float(v)  # the new weights are in
                os.write(self.ack, b"v")
            return got

    acks = Acks(Path(tempfile.mkdtemp()) / "acks")
    actors = [Reader.options(**(nodes.pin(i) if nodes else {})).remote(
        i, str(acks.path), nodes.address_of(i) if nodes else address) for i in range(actors_n)]
    ray.get([a.__ray_ready__.remote() for a in actors], timeout=timeout_s)
    done = [a.listen.remote(versions) for a in actors]
    check = readers_alive(ray, done)
    writer = StoreParameterStore(lambda: StoreClient(address, token=token), num_shards=shards, shard_homes=homes)
    starts, published = [], []
    for v in range(1, versions + 1):
        params = make_params(shapes, float(v))  # built before the clock starts
        starts.append(time.monotonic())
        writer.publish(name, v, params)
        published.append(time.monotonic())
        acks.wait(actors_n, timeout_s, check, f"version {v} of {name}")
    try:
        per_actor = ray.get(done, timeout=timeout_s)
    finally:
        acks.close()
        for a in actors:
            ray.kill(a)
    stages = [[p - s for s, p in zip(starts, published)],
              [t[v][0] - starts[v] for t in per_actor for v in range(versions)],
              [t[v][1] - starts[v] for t in per_actor for v in range(versions)]]
    return stages[2], {stage: float(np.median(xs)) * 1e3 for stage, xs in zip(STAGES, stages)}


def bench_ray(ray, actors_n: int, shapes, versions: int, timeout_s: float, nodes: Nodes | None = None) -> list[float]:
    @ray.remote(num_cpus=0)
    class RayReader:
        def __init__(self) -> None:
            self.model = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in make_params(shapes, 0.0).items()})

        def load(self, weights: dict[str, np.ndarray], v: int) -> float:
            self.model.load_state_dict({k: torch.from_numpy(w) for k, w in weights.items()})
            t = time.monotonic()
            assert float(self.model["t0"].reshape(-1)[0]) == float(v)
            return t

    actors = [RayReader.options(**(nodes.pin(i) if nodes else {})).remote() for i in range(actors_n)]
    ray.get([a.__ray_ready__.remote() for a in actors], timeout=timeout_s)
    out = []
    for v in range(1, versions + 1):
        weights = {k: t.numpy() for k, t in make_params(shapes, float(v)).items()}  # RLlib ships numpy weights
        t0 = time.monotonic()
        ref = ray.put(weights)
        out += [t - t0 for t in ray.get([a.load.remote(ref, v) for a in actors], timeout=timeout_s)]
        del ref
    for a in actors:
        ray.kill(a)
    return out


class Nodes:
    """Several raylets, a store worker each (one mesh): where actor ``i`` runs and reads."""

    def __init__(self, node_ids: list[str], addresses: list[str]) -> None:
        self.node_ids, self.addresses = node_ids, addresses

    def pin(self, i: int) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.node_ids[i % len(self.node_ids)], soft=False)}

    def address_of(self, i: int) -> str:
        return self.addresses[i % len(self.addresses)]

    def homes(self, shards: int, token: str) -> list:
        """Shard ``k``'s worker: raylet ``k % N``'s (what ``kilorl train``'s plan does across nodes)."""
        from functools import partial

        from kilorl.store import StoreClient

        return [partial(StoreClient, self.address_of(k), token=token) for k in range(shards)]


def start_raylets(ray, n: int, cpus_each: int) -> tuple[object, list[str]]:
    """A ``ray.cluster_utils.Cluster`` of ``n`` raylets; the driver's raylet first."""
    from kilorl.trainer.ray_start import start_local_cluster

    cluster = start_local_cluster({"num_cpus": cpus_each, "object_store_memory": 1 << 30},
                                  [{"num_cpus": cpus_each, "object_store_memory": 1 << 30}] * (n - 1))
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    here = ray.get_runtime_context().get_node_id()
    ids = sorted((x["NodeID"] for x in ray.nodes() if x["Alive"]), key=lambda i: i != here)
    return cluster, ids


def start_mesh(tmp: Path, shm: str, n: int) -> tuple[list[subprocess.Popen], list[str], str]:
    """``n`` store workers in one mesh (``--head`` then ``--join``), one per raylet."""
    from kilorl.store import StoreClient

    name = f"bench-{secrets.token_hex(3)}"
    head, head_address, token = start_worker(tmp, shm, mesh=["--head", "--cluster-name", name], name="w0")
    procs, addresses = [head], [head_address]
    for i in range(1, n):
        proc, address, _ = start_worker(tmp, shm, token, ["--join", head_address, "--cluster-name", name], f"w{i}")
        procs.append(proc)
        addresses.append(address)
    deadline = time.monotonic() + 60
    with StoreClient(addresses[-1], token=token) as c:
        while len(members := c.stats()["cluster"]["ring"]["members"]) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the store mesh has {len(members)} of {n} workers in its ring after 60 s")
            time.sleep(0.1)
    return procs, addresses, token


def bench_memcpy(shapes, repeats: int) -> list[float]:
    src = make_params(shapes, 1.0)
    dst = make_params(shapes, 0.0)
    out = []
    for _ in range(repeats):
        t0 = time.monotonic()
        for k in src:
            dst[k].copy_(src[k])
        out.append(time.monotonic() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--small-versions", type=int, default=200)
    ap.add_argument("--large-versions", type=int, default=15)
    ap.add_argument("--shards", type=int, default=2, help="parameter-server shards per version")
    ap.add_argument("--runs", type=int, default=1, help="repeat the comparison; report medians over runs")
    ap.add_argument("--raylets", type=int, default=1, help="spread the actors over this many raylets (a worker each)")
    ap.add_argument("--sync-timeout-s", type=float, default=120.0,
                    help="how long any one step may wait on another process (a version reaching every reader, "
                         "a reader starting) before the run stops with the reason; generous for a loaded machine")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import ray

    if args.raylets < 1:
        ap.error("--raylets must be >= 1")
    if not args.sync_timeout_s > 0:
        ap.error("--sync-timeout-s must be > 0")
    torch.set_num_threads(1)
    cluster, nodes = None, None
    if args.raylets > 1:
        cluster, node_ids = start_raylets(ray, args.raylets, -(-args.actors // args.raylets) + 1)
    else:
        ray.init(address="local", num_cpus=args.actors + 1, include_dashboard=False, log_to_driver=False)
    runs: list[dict[str, dict[str, dict[str, float]]]] = []
    breakdowns: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if cluster is not None:
            procs, addresses, token = start_mesh(Path(tmp), "2GiB", args.raylets)
            nodes, address = Nodes(node_ids, addresses), addresses[0]
        else:
            proc, address, token = start_worker(Path(tmp), "2GiB")  # 2 x 3 runs of a 100 MB policy kept 2 versions deep
            procs = [proc]
        try:
            for run in range(args.runs):
                results: dict[str, dict[str, dict[str, float]]] = {}
                stages: dict[str, dict[str, float]] = {}
                for idx, (label, shapes) in enumerate(SIZES.items()):
                    n = args.small_versions if label.startswith("small") else args.large_versions
                    if n <= 0:
                        continue
                    got = {}
                    for share in (False, True) if run % 2 == 0 else (True, False):  # each goes first in turn
                        got[share] = bench_store(ray, args.actors, shapes, n, address, token, args.shards,
                                                 f"bench{run}-{idx}-{share}", share=share,
                                                 timeout_s=args.sync_timeout_s, nodes=nodes)
                    stages[label] = got[actors_share(shapes)][1]
                    results[label] = {
                        COPIED: percentiles(got[False][0]),
                        VIEWS: percentiles(got[True][0]),
                        "Ray broadcast": percentiles(bench_ray(ray, args.actors, shapes, n, args.sync_timeout_s, nodes)),
                        "memcpy floor": percentiles(bench_memcpy(shapes, n)),
                    }
                runs.append(results)
                breakdowns.append(stages)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
    results = median_over_runs(runs)
    print(f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} CPUs, {args.actors} actors "
          f"over {args.raylets} raylet(s), "
          f"{args.shards} shards, median of {args.runs} run(s). "
          f"Command: `python benchmarks/param_sync_bench.py {' '.join(argv or sys.argv[1:])}`\n")
    print("| policy | system | p50 (ms) | p99 (ms) | samples per run |\n|---|---|---|---|---|")
    for label, rows in results.items():
        for system, r in rows.items():
            print(f"| {label} | {system} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['n']} |")
        way = VIEWS if actors_share(SIZES[label]) else COPIED
        ratio = rows["Ray broadcast"]["p50_ms"] / rows[way]["p50_ms"]
        print(f"| {label} | **speed vs Ray (p50 ratio), as actors read it ({way.split(', ')[1]})** "
              f"| **{ratio:.2f}x** | | |")
    print("\n| policy | kiloRL store, as actors read it: median ms from the publish's start to | " + " | ".join(STAGES)
          + " |\n|---|---|" + "---|" * len(STAGES))
    for label in results:
        cells = [float(np.median([b[label][stage] for b in breakdowns])) for stage in STAGES]
        print(f"| {label} | | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"median": results, "runs": runs, "stages": breakdowns}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
