"""Deciding to move a role away before it runs out of memory.

This module only decides; carrying a decision out (checkpoint the role, start a
replacement elsewhere, switch traffic, stop the old process) is the trainer's job. The
policy is a small stateful object so that one suspect role is not decided twice while
its replacement starts (a cooldown), and so that a round of decisions never moves more
than ``max_concurrent`` roles at once: the most urgent first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kilorl.monitor.settings import MigrationConfig


@dataclass(frozen=True)
class MemoryStatus:
    """One memory series of one role, as its leak detector sees it."""

    role: str
    rank: int
    node: str
    memory: str
    """Which series: ``host`` (RSS) or ``device:<index>``."""
    suspected: bool
    slope_bytes_per_s: float
    level_bytes: float
    limit_bytes: float | None
    time_to_limit_s: float

    @property
    def identity(self) -> tuple[str, int, str]:
        return (self.role, self.rank, self.node)


@dataclass(frozen=True)
class MigrationDecision:
    role: str
    rank: int
    node: str
    memory: str
    time_to_limit_s: float
    reason: str
    exclude_device: str | None
    """The device to avoid when placing the replacement (None for host memory: avoid the node)."""


def decide(statuses: Iterable[MemoryStatus], migrate_before_s: float) -> list[MigrationDecision]:
    """Stateless rule: every suspected series predicted to hit its limit within the horizon, soonest first."""
    per_role: dict[tuple[str, int, str], MemoryStatus] = {}
    for s in statuses:
        if not s.suspected or not math.isfinite(s.time_to_limit_s) or s.time_to_limit_s > migrate_before_s:
            continue
        best = per_role.get(s.identity)
        if best is None or s.time_to_limit_s < best.time_to_limit_s:
            per_role[s.identity] = s
    out = []
    for s in sorted(per_role.values(), key=lambda s: s.time_to_limit_s):
        out.append(
            MigrationDecision(
                role=s.role,
                rank=s.rank,
                node=s.node,
                memory=s.memory,
                time_to_limit_s=s.time_to_limit_s,
                reason=(
                    f"{s.memory} memory of {s.role}[{s.rank}] on {s.node} grows {s.slope_bytes_per_s / 2**20:.2f} MiB/s, "
                    f"limit {(s.limit_bytes or 0) / 2**30:.2f} GiB in {s.time_to_limit_s:.0f} s "
                    f"(< migrate_before_s={migrate_before_s:g})"
                ),
                exclude_device=s.memory.split(":", 1)[1] if s.memory.startswith("device:") else None,
            )
        )
    return out


class MigrationPolicy:
    """``decide`` with a per-role cooldown and a cap on migrations per round."""

    def __init__(self, config: MigrationConfig | None = None) -> None:
        self.config = config or MigrationConfig()
        self._last: dict[tuple[str, int], float] = {}

    def decide(self, statuses: Iterable[MemoryStatus], now: float) -> list[MigrationDecision]:
        cfg = self.config
        out = []
        for d in decide(statuses, cfg.migrate_before_s):
            last = self._last.get((d.role, d.rank))
            if last is not None and now - last < cfg.cooldown_s:
                continue
            if len(out) >= cfg.max_concurrent:
                break
            self._last[(d.role, d.rank)] = now
            out.append(d)
        return out

    def forget(self, role: str, rank: int) -> None:
        """Clear the cooldown (the migration failed and may be retried at once)."""
        self._last.pop((role, rank), None)
