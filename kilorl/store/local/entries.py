"""The records of a worker's object table: arena regions, objects, and what a reader gets."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Region:
    """A block of the arena; freed when ``refs`` drops to zero."""

    offset: int
    size: int
    refs: int = 1


@dataclass(eq=False)
class Obj:
    """One stored object and its location in exactly one tier (or only in L2)."""

    key: str
    gen: int
    meta: dict[str, Any]
    size: int
    preferred: str
    expires_at: float | None = None
    tier: str | None = None
    region: Region | None = None
    disk_path: str | None = None
    tensor: Any = None
    l2_mode: str | None = None  # "through" | "back" | None
    l2_durable: bool = False
    l2_path: str | None = None
    l2_offset: int = 0
    pinned: bool = False
    promoting: bool = False
    heat: float = 0.0
    last_access: float = field(default_factory=time.monotonic)


@dataclass
class ReadHandle:
    """What a reader gets: a referenced arena region, or bytes copied from another tier."""

    meta: dict[str, Any]
    size: int
    tier: str
    region: Region | None = None
    data: memoryview | None = None
    tensor: Any = None
