"""A stand-in role process for the monitor tests: reports every metric, optionally leaks or churns memory.

Run as ``python -m tests.monitor.role_proc --role actor --rank 0 --node n0 --sink SOCK``.
It is a real process with real memory behaviour; nothing in it is simulated except the RL work.
"""

from __future__ import annotations

import argparse
import random
import time

from kilorl.monitor import LeakDetectorConfig, RoleMetrics


def exercise(m: RoleMetrics, rng: random.Random) -> None:
    """Touch every CPU metric once, with plausible values."""
    m.inc_env_steps(rng.randint(50, 150))
    m.record_episodes([rng.uniform(0, 500)])
    m.set_policy_lag(rng.randint(0, 2))
    m.observe_learner_update(rng.uniform(0.01, 0.2))
    m.observe_publish_latency(rng.uniform(0.001, 0.05))
    m.add_comm_bytes("sent", rng.randint(1000, 9000))
    m.add_comm_bytes("received", rng.randint(1000, 9000))
    m.set_store_tier("host", rng.randint(1, 2**20), 2**30)
    m.inc_store_lookups("host", hits=rng.randint(5, 10), misses=rng.randint(0, 2))
    m.record_migration("actor", 9, "decided")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--role", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--interval", type=float, default=0.5, help="push interval s")
    p.add_argument("--leak-mib-s", type=float, default=0.0, help="grow the heap by this many MiB/s and keep it")
    p.add_argument("--leak-after-s", type=float, default=0.0, help="start leaking after this many seconds")
    p.add_argument("--churn-mib", type=float, default=0.0, help="allocate and free up to this much per tick (healthy)")
    p.add_argument("--warmup-s", type=float, default=20.0)
    p.add_argument("--window-s", type=float, default=40.0)
    p.add_argument("--budget-mib", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    leak_cfg = LeakDetectorConfig(warmup_s=a.warmup_s, window_s=a.window_s)
    m = RoleMetrics(a.role, a.rank, a.node, sink=a.sink, push_interval_s=a.interval, leak=leak_cfg,
                    memory_budget_bytes=a.budget_mib * 2**20 or None).start()
    rng = random.Random(a.seed)
    held: list[bytearray] = []
    t0 = last = time.monotonic()
    tick = 0.05
    while True:
        exercise(m, rng)
        now = time.monotonic()
        if a.leak_mib_s and now - t0 >= a.leak_after_s:
            held.append(bytearray(b"\x01") * int(a.leak_mib_s * 2**20 * (now - last)))  # written, so resident
        if a.churn_mib:
            scratch = [bytearray(b"\x02") * int(rng.uniform(0.1, 1.0) * a.churn_mib * 2**20 / 4) for _ in range(4)]
            del scratch
        last = now
        time.sleep(tick)


if __name__ == "__main__":
    main()
