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
                 "migration": {"migrate_before_s": 600.0, "cooldown_s": 600.0, "ready_timeout_s": 300.0},
                 "memory_budget_bytes": {"actor": BUDGET_BYTES, "learner": BUDGET_BYTES, "store": BUDGET_BYTES},
                 "inject_leaks": leaks},
    )


STEP_S = 0.0015
"""SlowCartPole's step time: a batch of 2 actors x 4 envs x 32 steps takes >= 0.19 s."""


def slow_env(cfg: Any, step_s: float = STEP_S) -> Any:
    """``cfg`` on SlowCartPole, so a run lasts past its decisions whatever the machine's speed."""
    return cfg.model_copy(update={"env": cfg.env.model_copy(update={
        "id": "tests.trainer.broken_env:SlowCartPole", "kwargs": {"step_s": step_s}})})
