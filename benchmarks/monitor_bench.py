"""Costs of the monitor's transport: why roles send snapshots instead of using multiprocess mode.

    python benchmarks/monitor_bench.py

Measures, each as the median of 5 runs in fresh processes:
* one counter increment on a role's hot path: RoleMetrics.inc_env_steps, a plain
  in-process prometheus_client counter, and the same counter in prometheus_client's
  multiprocess mode (mmap'd file per process);
* one push (sample memory, run the leak detector, encode, send) and its frame size;
* one scrape of a node exporter serving 1, 8 and 32 roles;
* CartPole env steps per CPU-second of a random-action loop over a Gymnasium vector env (8 envs),
  with and without a RoleMetrics reporting every step and pushing once per second to a
  live exporter in its own process (runs alternate on/off; a stand-in for the trainer until it is wired).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
N_INC = 200_000
RUNS = 5

INC_CODE = {
    "RoleMetrics.inc_env_steps": (
        "from kilorl.monitor import RoleMetrics\n"
        "m = RoleMetrics('actor', 0, 'n0', sample_resources=False)\n"
        "f = lambda: m.inc_env_steps(1)\n"
    ),
    "prometheus_client counter (in-process)": (
        "from prometheus_client import CollectorRegistry, Counter\n"
        "c = Counter('x', 'x', ['role','rank','node'], registry=CollectorRegistry()).labels('actor','0','n0')\n"
        "f = lambda: c.inc(1)\n"
    ),
    "prometheus_client counter (multiprocess mode)": (
        "from prometheus_client import Counter\n"
        "c = Counter('x', 'x', ['role','rank','node']).labels('actor','0','n0')\n"
        "f = lambda: c.inc(1)\n"
    ),
}
TIMER = f"import time\nt = time.perf_counter()\nfor _ in range({N_INC}): f()\nprint((time.perf_counter() - t) / {N_INC} * 1e9)\n"


def inc_costs() -> dict[str, float]:
    out = {}
    for name, code in INC_CODE.items():
        runs = []
        for _ in range(RUNS):
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
                if "multiprocess" in name:
                    env["PROMETHEUS_MULTIPROC_DIR"] = d
                r = subprocess.run([sys.executable, "-c", code + TIMER], capture_output=True, text=True, env=env, check=True)
                runs.append(float(r.stdout))
        out[name] = round(statistics.median(runs), 1)
    return out


def push_and_scrape() -> dict:
    import random

    from kilorl.monitor import NodeExporter, RoleMetrics
    from kilorl.monitor.wire import encode_snapshot
    from tests.monitor.role_proc import exercise

    rng = random.Random(0)
    out: dict = {}
    with tempfile.TemporaryDirectory(dir="/tmp") as d, NodeExporter("n0", Path(d) / "n0.sock") as exp:
        m = RoleMetrics("actor", 0, "n0", sink=exp.socket_path)
        exercise(m, rng)
        times = []
        for _ in range(50):
            t = time.perf_counter()
            m.push()
            times.append(time.perf_counter() - t)
        out["push_ms"] = round(statistics.median(times) * 1e3, 3)
        out["frame_bytes"] = len(encode_snapshot(m.snapshot()))
        m.close()
        for n in (1, 8, 32):
            for i in range(n):
                r = RoleMetrics("actor", i, "n0", sample_resources=False)
                exercise(r, rng)
                r.sample()
                exp._receive(i, r.snapshot())
            times = []
            for _ in range(RUNS * 4):
                t = time.perf_counter()
                body = exp.exposition()
                times.append(time.perf_counter() - t)
            out[f"scrape_ms_{n}_roles"] = round(statistics.median(times) * 1e3, 2)
            out[f"scrape_bytes_{n}_roles"] = len(body)
            for i in range(n):
                exp._depart(i)
    return out


def cartpole_overhead(steps: int = 16_000, pairs: int = 7) -> dict:
    import gymnasium as gym
    import numpy as np

    from kilorl.monitor import RoleMetrics

    def loop(m: RoleMetrics | None) -> float:
        envs = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        ret = np.zeros(8)
        t = time.process_time()  # CPU time of the whole process (pusher thread included): other jobs' load is not counted
        for _ in range(steps // 8):
            _, r, term, trunc, _ = envs.step(rng.integers(0, 2, 8))
            ret += r
            done = term | trunc
            if m is not None:
                m.inc_env_steps(8)
                if done.any():
                    m.record_episodes(ret[done])
            ret[done] = 0.0
        used = time.process_time() - t
        envs.close()
        return steps / used

    on, off, ratio = [], [], []
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        sock = str(Path(d) / "n0.sock")
        exporter = subprocess.Popen([sys.executable, "-m", "kilorl.monitor.exporter", "--node", "n0", "--socket", sock],
                                    stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        exporter.stdout.readline()  # ready
        for i in range(pairs):  # alternate which goes first, so load drifts hit both equally
            m = RoleMetrics("actor", 0, "n0", sink=sock).start()
            if i % 2 == 0:
                a, b = loop(None), loop(m)
            else:
                b, a = loop(m), loop(None)
            m.close()
            off.append(a)
            on.append(b)
            ratio.append(b / a)
        exporter.terminate()
        exporter.wait()
    return {"cartpole_steps_per_s_off": round(statistics.median(off)), "cartpole_steps_per_s_on": round(statistics.median(on)),
            "cartpole_slowdown_pct_median_of_pairs": round(100 * (1 - statistics.median(ratio)), 2),
            "cartpole_slowdown_pct_per_pair": [round(100 * (1 - r), 1) for r in ratio]}


def main() -> None:
    res = {"inc_ns": inc_costs(), **push_and_scrape(), **cartpole_overhead()}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
