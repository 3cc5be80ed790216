"""The run configuration the migration tests share: fast leak detection, one injected leak."""

from __future__ import annotations

from typing import Any

from tests.conftest import tiny_config

LEAK_BYTES_PER_S = 24 * 2**20
"""The injected leak: a few MiB per second (24 MiB/s, so a test needs seconds, not minutes)."""
BUDGET_BYTES = 3 * 2**30
"""Host memory budget of every role: the limit the leaking role must be moved before."""


def migration_config(leaks: list[dict[str, Any]], total_env_steps: int, actors: int = 2, learners: int = 1) -> Any:
    """CartPole, ``actors`` actors, monitor on with a detector tuned for seconds, ``leaks`` injected."""
    return tiny_config(
        parallelism={"actor": actors, "envs_per_actor": 4, "learner": learners},
        train={"total_env_steps": total_env_steps, "seed": 5},
        checkpoint={"every_env_steps": None},
        monitor={"prometheus": {"enabled": True, "port": 0, "push_interval_s": 0.25},
                 # warm-up past the first allocations (imports come before the reporter); a 6 s window; two agreeing verdicts
                 "leak": {"warmup_s": 4.0, "window_s": 6.0, "min_samples": 8, "confirmations": 2},
                 "migration": {"migrate_before_s": 600.0, "cooldown_s": 600.0, "ready_timeout_s": 90.0},
                 "memory_budget_bytes": {"actor": BUDGET_BYTES, "learner": BUDGET_BYTES, "store": BUDGET_BYTES},
                 "inject_leaks": leaks},
    )
