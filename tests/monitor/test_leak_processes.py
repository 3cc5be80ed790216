"""Leak detection on real processes: a leaking role is flagged within 60 s, a churning healthy one never."""

from __future__ import annotations

import math
import time

import pytest

from kilorl.monitor import NodeExporter
from tests.monitor.helpers import series

LEAK_MIB_S = 3.0
LEAK_AFTER_S = 25.0  # after the detector's 20 s warm-up: the leak starts once the role is "running"


def _host(text: str, name: str) -> dict[str, float]:
    return {lab["role"]: v for lab, v in series(text).get(name, []) if lab.get("memory") == "host"}


@pytest.mark.slow
def test_a_leaking_process_is_flagged_within_60_s_and_a_churning_one_is_not(short_dir, spawn_role):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        t_start = time.monotonic()
        spawn_role("leaker", 0, "n0", exp.socket_path, "--interval", "1", "--leak-mib-s", str(LEAK_MIB_S),
                   "--leak-after-s", str(LEAK_AFTER_S), "--budget-mib", "4000")
        spawn_role("healthy", 0, "n0", exp.socket_path, "--interval", "1", "--churn-mib", "40")
        leak_start = t_start + LEAK_AFTER_S
        flagged_at = None
        healthy_flags = 0
        last = ""
        deadline = leak_start + 70
        while time.monotonic() < deadline:
            last = exp.exposition().decode()
            sus = _host(last, "kilorl_memory_leak_suspected")
            healthy_flags += int(sus.get("healthy", 0.0) == 1.0)
            if flagged_at is None and sus.get("leaker") == 1.0:
                flagged_at = time.monotonic()
            if flagged_at is not None and time.monotonic() >= leak_start + 60:
                break
            time.sleep(0.5)
        assert flagged_at is not None, "the leaking process was not flagged"
        delay = flagged_at - leak_start
        print(f"leak of {LEAK_MIB_S} MiB/s flagged {delay:.1f} s after it started")
        assert delay <= 60
        assert healthy_flags == 0
        slope = _host(last, "kilorl_memory_leak_slope_bytes_per_second")
        assert slope["leaker"] == pytest.approx(LEAK_MIB_S * 2**20, rel=0.5)
        assert abs(slope["healthy"]) < 0.5 * 2**20
        ttl = _host(last, "kilorl_memory_time_to_limit_seconds")
        assert math.isfinite(ttl["leaker"]) and 0 < ttl["leaker"] < 4000 / LEAK_MIB_S
        assert math.isinf(ttl["healthy"])
