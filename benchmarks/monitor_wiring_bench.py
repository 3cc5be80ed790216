"""Monitoring in real training runs: overhead on throughput, and false leak alarms in healthy runs.

``overhead``: CartPole (the example config, 2 actors), monitor.prometheus on vs off,
interleaved on/off/on/off... in one Ray instance, so both see the same machine load.
Throughput is the steady-state env steps/s from the run's metrics rows (first row to
last, start-up excluded). Prints each run and the medians.

``healthy``: runs the given example configs with the monitor on and the default leak
detector (warm-up 20 s, window 40 s), scraping every node exporter every 2 s; prints how
long every role was watched and every (role, memory) the detector flagged.

    python benchmarks/monitor_wiring_bench.py overhead --runs 3 --steps 40000
    python benchmarks/monitor_wiring_bench.py healthy --config examples/cartpole_ppo.yaml --steps 300000
    python benchmarks/monitor_wiring_bench.py healthy --config examples/cartpole_ppo.yaml --budget-gib 2

With ``--budget-gib`` every role has that memory budget, so the steep-leak test
(``leak.fast_max_ttl_s``) has a limit to forecast to, and migration is on: any decision in
``migrations.jsonl`` of a healthy run is a false alarm that would have restarted a role.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import ray
from prometheus_client.parser import text_string_to_metric_families

from kilorl.config import load_config
from kilorl.trainer import Trainer
from kilorl.trainer.metrics import read_metrics


def _steady_sps(run_dir: Path) -> float:
    rows = read_metrics(run_dir)
    first, last = rows[0], rows[-1]
    return (last["env_steps"] - first["env_steps"]) / max(last["train_time"] - first["train_time"], 1e-9)


def _cfg(path: str, steps: int, monitor: bool, actors: int | None, budget_gib: float | None = None):
    overrides = [f"train.total_env_steps={steps}", "logging.progress=false", "logging.report_every_s=1.0",
                 "logging.tensorboard=false",
                 f"monitor.prometheus.enabled={str(monitor).lower()}", "monitor.prometheus.port=0",
                 "checkpoint.every_env_steps=100000000"]
    if actors:
        overrides.append(f"parallelism.actor={actors}")
    if budget_gib:  # a limit close enough for the steep-leak test to act on; decisions would be carried out
        b = int(budget_gib * 2**30)
        overrides += [f"monitor.memory_budget_bytes={{actor: {b}, learner: {b}, store: {b}}}",
                      "monitor.migration.migrate_before_s=600"]
    return load_config(path, overrides)


def overhead(args: argparse.Namespace) -> None:
    out: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                run = Path(d) / f"{mode}-{i}"
                Trainer(_cfg(args.config, args.steps, mode == "on", args.actors), run).fit()
                out[mode].append(_steady_sps(run))
                print(f"run {i} monitor {mode}: {out[mode][-1]:.0f} env steps/s", flush=True)
    off, on = statistics.median(out["off"]), statistics.median(out["on"])
    print(json.dumps({"sps_off": out["off"], "sps_on": out["on"], "median_off": off, "median_on": on,
                      "slowdown": 1 - on / off}))


class Watch:
    """Scrapes every exporter of a run every ``interval_s``: watched time per role, leak flags."""

    def __init__(self, run_dir: Path, interval_s: float = 2.0) -> None:
        self.run_dir, self.interval_s = run_dir, interval_s
        self.first: dict[tuple, float] = {}
        self.last: dict[tuple, float] = {}
        self.flags: dict[tuple, float] = {}
        self.max_slope: dict[tuple, float] = {}
        self.evaluations = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        path = self.run_dir / "monitor" / "targets.json"
        while not self.stop.wait(self.interval_s):
            try:
                groups = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for g in groups:
                try:
                    text = urllib.request.urlopen(f"http://{g['targets'][0]}/metrics", timeout=3).read().decode()
                except OSError:
                    continue
                self._fold(text, time.monotonic())

    def _fold(self, text: str, now: float) -> None:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if "memory" not in s.labels:
                    continue
                key = (s.labels["role"], s.labels["rank"], s.labels["memory"])
                if s.name == "kilorl_memory_leak_suspected":
                    self.first.setdefault(key, now)
                    self.last[key] = now
                    self.evaluations += 1
                    if s.value >= 1:
                        self.flags.setdefault(key, now - self.first[key])
                elif s.name == "kilorl_memory_leak_slope_bytes_per_second":
                    self.max_slope[key] = max(self.max_slope.get(key, float("-inf")), s.value)


def healthy(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        watch = Watch(run)
        watch.thread.start()
        t0 = time.monotonic()
        result = Trainer(_cfg(args.config, args.steps, True, args.actors, args.budget_gib), run).fit()
        wall = time.monotonic() - t0
        watch.stop.set()
        watch.thread.join()
        path = run / "monitor" / "migrations.jsonl"  # every decision the detector's verdicts led to
        decisions = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    watched = {f"{r}[{k}] {m}": round(watch.last[key] - watch.first[key], 1)
               for key in watch.first for r, k, m in [key]}
    print(json.dumps({"config": args.config, "budget_gib": args.budget_gib, "wall_s": round(wall, 1),
                      "env_steps": result.env_steps, "stopped": result.stopped,
                      "migration_decisions": [(d["role"], d["rank"], d["outcome"], d["reason"]) for d in decisions],
                      "watched_s": watched,
                      "role_seconds_watched": round(sum(watched.values()), 1), "scrapes_of_a_verdict": watch.evaluations,
                      "false_alarms": {f"{r}[{k}] {m}": round(t, 1) for (r, k, m), t in watch.flags.items()},
                      "max_slope_MiB_per_s": {f"{r}[{k}] {m}": round(v / 2**20, 3)
                                              for (r, k, m), v in watch.max_slope.items()}}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("overhead", "healthy"):
        s = sub.add_parser(name)
        s.add_argument("--config", default="examples/cartpole_ppo.yaml")
        s.add_argument("--steps", type=int, default=40_000)
        s.add_argument("--actors", type=int, default=None)
        s.add_argument("--runs", type=int, default=3)
        s.add_argument("--budget-gib", type=float, default=None,
                       help="healthy: memory_budget_bytes of every role (the steep-leak test needs a limit)")
    args = p.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    (overhead if args.what == "overhead" else healthy)(args)
    ray.shutdown()


if __name__ == "__main__":
    main()
