"""The ``monitor`` section of a run configuration.

Kept in the monitor package (not in ``kilorl.config``) so that this layer stays
importable on its own; the run configuration embeds :class:`MonitorConfig` as its
``monitor`` field.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ConfigDict, Field, field_validator

ROLES = ("actor", "learner", "store")
"""The role names a run has: budgets and injected leaks name one of these."""


def check_role(name: str, what: str = "") -> str:
    """``name`` if it is a role of the run, else a ValueError listing the roles (a typo must not do nothing)."""
    if name in ROLES:
        return name
    close = difflib.get_close_matches(name, ROLES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{what}names no role of the run{hint}; roles: {', '.join(ROLES)}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class PrometheusConfig(_Section):
    enabled: bool = False
    """Serve Prometheus metrics: one exporter per node, all roles of that node behind it."""
    port: int = Field(default=9464, ge=0, le=65535)
    """HTTP port of the driver node's exporter (0: any free port); other nodes use port+1.. when taken."""
    host: str = "127.0.0.1"
    """Address the exporters bind; loopback by default, set 0.0.0.0 to be scraped from other machines."""
    push_interval_s: float = Field(default=1.0, gt=0)
    """How often each role sends its snapshot to its node's exporter."""
    stale_after_s: float = Field(default=10.0, gt=0)
    """A role silent for this long (hung, not just dead) has its series dropped."""
    scrape_interval_s: float = Field(default=5.0, gt=0)
    """Scrape interval written into the generated Prometheus configuration."""


class LeakDetectorConfig(_Section):
    window_s: float = Field(default=40.0, gt=0)
    """Sliding window of memory samples the trend is fitted on."""
    warmup_s: float = Field(default=20.0, ge=0)
    """Samples from a role's first seconds are ignored (start-up allocations are not a leak)."""
    min_slope_bytes_per_s: float = Field(default=512 * 1024, gt=0)
    """Growth slower than this is never flagged, however significant (0.5 MiB/s)."""
    max_jump_fraction: float = Field(default=0.5, gt=0, le=1)
    """A window whose largest sample-to-sample increase exceeds this share of its rise is a step, not a leak."""
    min_z: float = Field(default=3.0, gt=0)
    """Mann-Kendall z-score the upward trend must reach (3.0: one-sided p ~ 0.0013)."""
    confirmations: int = Field(default=3, ge=1)
    """Consecutive evaluations that must agree before a leak is reported."""
    min_samples: int = Field(default=12, ge=6)
    """Fewer samples than this in the window: no verdict yet."""
    max_samples: int = Field(default=200, ge=8)
    """Older samples are thinned out beyond this many (bounds the O(n^2) Theil-Sen cost)."""
    fast_max_ttl_s: float = Field(default=30.0, ge=0)
    """A steep leak forecast to reach its limit within this many seconds is reported from the short
    window (``fast_window_s``), warm-up included, without the full window (0: never). About what the full
    test needs after the warm-up (half a window and its confirmations): sooner, it would come too late."""
    fast_window_s: float = Field(default=10.0, gt=0)
    """The short window of the steep-leak test: the most recent samples, at least 3/4 of it spanned."""
    fast_min_samples: int = Field(default=8, ge=5)
    """Fewer samples than this in the short window: no steep-leak verdict."""
    fast_max_jump_fraction: float = Field(default=0.3, gt=0, le=1)
    """The short window's largest sample-to-sample change, up or down, may be at most this share of its rise (a
    leak rises in many small steps; an allocation caught mid-way by a sample is two or three large ones, and a
    large drop is memory released)."""
    fast_confirmations: int = Field(default=2, ge=1)
    """Consecutive steep-leak verdicts needed (a sawtooth's rising stretch fills the window only for an instant)."""
    fast_min_slope_bytes_per_s: float = Field(default=4 * 2**20, gt=0)
    """The steep-leak test needs at least this slope over the short window (4 MiB/s)."""
    fast_min_z: float = Field(default=2.5, gt=0)
    """Mann-Kendall z the short window must reach (2.5: six strictly rising samples give 2.6, eight 3.3)."""


class MigrationConfig(_Section):
    enabled: bool = True
    """Carry decisions out in a training run (kilorl.trainer.migration); needs ``prometheus.enabled``."""
    migrate_before_s: float = Field(default=120.0, gt=0)
    """Move a role when it is predicted to reach its memory limit within this many seconds."""
    cooldown_s: float = Field(default=300.0, ge=0)
    """After a decision for a role, no new decision for it for this long (its replacement needs time)."""
    max_concurrent: int = Field(default=1, ge=1)
    """Most migrations decided in one round (the rest wait for the next)."""
    ready_timeout_s: float = Field(default=120.0, gt=0)
    """How long a replacement may take to start; past it the attempt fails and the old role keeps serving."""
    replacement_start_s: float | None = Field(default=None, gt=0)
    """How long a replacement takes to serve, for choosing how to move a role: where the forecast puts the
    limit nearer than this, the old process ends first (its work in flight dropped and counted) instead of
    serving on until the replacement does. None: measured in the run (its role start-up and every replacement
    so far); set it where replacements start slower than the run's own roles did (e.g. pods pulling images)."""


class LeakInjectionConfig(_Section):
    """Fault injection for tests and drills: one role process allocates host memory it never frees."""

    role: str = Field(min_length=1)
    """Role name that leaks: actor, learner, or store (a store worker; its rank in head-first order, the head 0)."""
    rank: int = Field(default=0, ge=0)
    """Which instance of the role leaks."""
    bytes_per_s: float = Field(gt=0)
    """Leak rate (bytes of touched, resident memory per second)."""
    start_after_s: float = Field(default=0.0, ge=0)
    """Seconds after the role process starts reporting before the leak begins."""

    @field_validator("role")
    @classmethod
    def _a_role_of_the_run(cls, role: str) -> str:
        return check_role(role)


class MonitorConfig(_Section):
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    """Prometheus exporters and service discovery."""
    leak: LeakDetectorConfig = Field(default_factory=LeakDetectorConfig)
    """Leak detector applied to every role's host RSS and device memory."""
    migration: MigrationConfig = Field(default_factory=MigrationConfig)
    """When a suspected leak makes the trainer move a role away."""
    memory_budget_bytes: dict[str, int] = Field(default_factory=dict)
    """Per role name (actor, learner, store; another key is an error): host memory budget; the limit is the lower
    of it and node RAM."""
    inject_leaks: list[LeakInjectionConfig] = Field(default_factory=list)
    """Fault injection (tests, drills): roles that leak on purpose. The leak belongs to the process: a
    replacement started by a migration does not inherit it (a Ray restart after a crash does)."""

    @field_validator("memory_budget_bytes")
    @classmethod
    def _budgets_name_roles(cls, budgets: dict[str, int]) -> dict[str, int]:
        for name in budgets:
            check_role(name, f"key {name!r} ")
        return budgets
