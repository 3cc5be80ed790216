"""A role process keeps the heap it frees: repeated large allocations stop faulting pages in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kilorl.config import ConfigError
from kilorl.roles import env_runner, heap, learner
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config

# Each round allocates and touches 8 blocks of 1 MiB, then frees them all. glibc's defaults
# trim the freed top of the heap after every round, so the next round faults it in again.
CHURN = r"""
import json, resource, sys
from kilorl.roles.heap import retain_freed_memory
took = retain_freed_memory(int(sys.argv[1]))

def round_():
    blocks = [bytearray(1 << 20) for _ in range(8)]  # bytearray zero-fills: every page is touched
    del blocks

round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(json.dumps({"took": took, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def churn(limit_mb: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHURN, str(limit_mb)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_that_retains_freed_memory_does_not_fault_its_blocks_in_again():
    default, retained = churn(0), churn(256)
    assert default["took"] is False and retained["took"] is True
    # 20 rounds x 8 MiB re-faulted with the defaults: thousands of 4 KiB pages (a few with huge pages)
    assert default["faults"] >= 20 * 4
    assert retained["faults"] * 10 <= default["faults"]


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="limit_mb"):
        heap.retain_freed_memory(-1)


def test_the_config_field_refuses_a_negative_size_by_name():
    with pytest.raises(ConfigError, match="retain_freed_memory_mb"):
        tiny_config(train={"retain_freed_memory_mb": -5})


def test_both_roles_apply_the_configured_limit(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(env_runner, "retain_freed_memory", calls.append)
    monkeypatch.setattr(learner, "retain_freed_memory", calls.append)
    cfg = tiny_config(train={"retain_freed_memory_mb": 77})
    store = InMemoryParameterStore()
    learner.LearnerRole(cfg, store)
    worker = env_runner.EnvRunner(cfg, store, 0, 1)
    worker.close()
    assert calls == [77, 77]
