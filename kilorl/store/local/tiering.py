"""Placement policy: tier preference, access heat, promotion and demotion choices.

Heat is an access counter with exponential decay (half-life ``HALF_LIFE_S``), so both
frequency and recency count. The policy only decides; the object table moves bytes.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable
from typing import Protocol

TIER_ORDER = ("device", "dram", "disk")  # fastest first; None = only in L2
HALF_LIFE_S = 30.0
HOT_ACCESSES = 4.0  # heat that lifts an object above its preferred tier (disk -> dram)


def tier_rank(tier: str | None) -> int:
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


@functools.cache
def placement_order(preferred: str | None) -> tuple[str | None, ...]:
    """Tiers to try for an object preferring ``preferred``: it, the slower ones, then the faster
    ones (computed once per tier: every write asks)."""
    rank = tier_rank(preferred)
    return (preferred, *[t for t in TIER_ORDER if tier_rank(t) > rank],
            *[t for t in reversed(TIER_ORDER) if tier_rank(t) < rank])


class HasHeat(Protocol):
    heat: float
    last_access: float
    pinned: bool


def decayed(obj: HasHeat, now: float | None = None) -> float:
    now = time.monotonic() if now is None else now
    return obj.heat * math.exp2(-(now - obj.last_access) / HALF_LIFE_S)


def touch(obj: HasHeat, now: float | None = None) -> float:
    """Records one access and returns the new heat."""
    now = time.monotonic() if now is None else now
    obj.heat = decayed(obj, now) + 1.0
    obj.last_access = now
    return obj.heat


def preferred_tier(key: str, explicit: str | None, rules: Iterable[tuple[str, str]], available: set[str]) -> str:
    """The tier an object should live in: explicit > first matching prefix rule > dram."""
    if explicit:
        return explicit
    for prefix, tier in rules:
        if key.startswith(prefix) and tier in available:
            return tier
    return "dram"


def promotion_target(current: str | None, preferred: str, heat: float, available: set[str]) -> str | None:
    """Where an accessed object should move, or None to leave it.

    Objects below their preferred tier go back up on access (they were demoted under
    pressure); hot objects preferring disk are lifted into DRAM.
    """
    if tier_rank(current) > tier_rank(preferred) and preferred in available:
        return preferred
    if tier_rank(current) > tier_rank("dram") and heat >= HOT_ACCESSES:
        return "dram"
    return None


def coldest_first(objs: Iterable[HasHeat], now: float | None = None) -> list:
    """Demotion candidates, coldest first; pinned objects never move."""
    now = time.monotonic() if now is None else now
    return sorted((o for o in objs if not o.pinned), key=lambda o: decayed(o, now))
