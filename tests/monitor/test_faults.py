"""Fault injection: the leak ``monitor.inject_leaks`` asks for is real, resident and stoppable."""

from __future__ import annotations

import time

import psutil
import pytest
from pydantic import ValidationError

from kilorl.monitor.faults import LeakInjector
from kilorl.monitor.settings import MonitorConfig
from kilorl.roles.monitoring import MonitorSpec, injected_leak

MiB = 2**20


def test_the_injected_leak_grows_resident_memory_at_its_rate_and_stop_frees_it():
    proc = psutil.Process()
    before = proc.memory_info().rss
    leak = LeakInjector(64 * MiB, tick_s=0.05).start()
    t0 = time.monotonic()
    time.sleep(1.0)
    grown = proc.memory_info().rss - before
    held = leak.allocated_bytes
    elapsed = time.monotonic() - t0
    assert 0.7 * 64 * MiB <= held <= 64 * MiB * elapsed
    assert grown >= 0.6 * held  # touched pages, not a lazy reservation
    leak.stop()
    assert proc.memory_info().rss - before < 0.5 * held  # chunks this large go back to the OS


_KEEPS_FREED_HEAP = """
import time, psutil
from kilorl.monitor.faults import LeakInjector
from kilorl.roles.heap import retain_freed_memory
assert retain_freed_memory(256)  # what every actor and learner does at start (train.retain_freed_memory_mb)
proc = psutil.Process()
before = proc.memory_info().rss
leak = LeakInjector(64 * 2**20, tick_s=0.05).start()
time.sleep(1.0)
held = leak.allocated_bytes
leak.stop()
print(held, proc.memory_info().rss - before)
"""


def test_a_stopped_leak_is_freed_in_a_role_that_keeps_freed_heap():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _KEEPS_FREED_HEAP], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    held, left = map(int, out.stdout.split())
    assert held >= 0.7 * 64 * MiB and left < 0.5 * held  # the leak's chunks are unmapped, not kept by malloc


def test_the_leak_waits_for_its_start_delay():
    leak = LeakInjector(64 * MiB, start_after_s=5.0, tick_s=0.05).start()
    time.sleep(0.4)
    leak.stop()
    assert leak.allocated_bytes == 0


def test_an_injected_leak_names_its_missing_or_bad_field():
    with pytest.raises(ValidationError, match="bytes_per_s"):
        MonitorConfig(inject_leaks=[{"role": "actor"}])
    with pytest.raises(ValidationError, match="rank"):
        MonitorConfig(inject_leaks=[{"role": "actor", "rank": -1, "bytes_per_s": 1.0}])
    with pytest.raises(ValueError, match="bytes_per_s"):
        LeakInjector(0.0)


def test_only_the_configured_role_leaks_and_a_migration_replacement_does_not():
    config = MonitorConfig(inject_leaks=[{"role": "actor", "rank": 1, "bytes_per_s": MiB, "start_after_s": 60}])
    spec = MonitorSpec("/tmp/run", config)
    assert injected_leak(spec, "actor", 0) is None and injected_leak(spec, "learner", 1) is None
    assert injected_leak(MonitorSpec("/tmp/run", config, replacement=True), "actor", 1) is None
    leak = injected_leak(spec, "actor", 1)
    assert leak is not None and leak.bytes_per_s == MiB
    leak.stop()
