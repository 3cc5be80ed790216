"""Per-key metadata records of a store cluster, kept on the key's ring owner (+ one replica).

A record says which worker holds a key's bytes (``holder``; ``""`` means only the shared
L2 directory has them), the cluster-wide ``ver`` of the current value, its size,
serialization meta, write mode and tier, which workers hold or are fetching copies
(``copies``, with how often each served one: the fan-out relay picks from them) and
whether the bytes died with their holder (``lost``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

L2_HOLDER = ""


def new_version(previous: int = 0) -> int:
    """Cluster versions: microseconds of the owner's clock, strictly above the previous one,
    so a record recreated after its owner died still outranks stale copies."""
    return max(previous + 1, time.time_ns() // 1000)


@dataclass
class MetaRecord:
    key: str
    ver: int
    holder: str
    size: int
    meta: dict[str, Any]
    mode: str = "none"
    tier: str = "dram"
    """Tier of the holder's copy when it was written (informational: tiers move)."""
    copies: dict[str, int] = field(default_factory=dict)
    """member -> copies it has served (the holder is included)."""
    lost: bool = False

    @property
    def durable(self) -> bool:
        return self.mode != "none"

    def to_wire(self) -> dict[str, Any]:
        return {"key": self.key, "ver": self.ver, "holder": self.holder, "size": self.size, "meta": self.meta,
                "mode": self.mode, "tier": self.tier, "copies": self.copies, "lost": self.lost}

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> MetaRecord:
        return cls(str(raw["key"]), int(raw["ver"]), str(raw["holder"]), int(raw["size"]), dict(raw["meta"]),
                   str(raw.get("mode", "none")), str(raw.get("tier", "dram")),
                   {str(k): int(v) for k, v in dict(raw.get("copies", {})).items()}, bool(raw.get("lost", False)))

    def pick_source(self, requester: str, fanout: int, exclude: set[str]) -> str:
        """Where ``requester`` should pull from: the holder until it has served ``fanout``
        copies, then the copy (finished or in flight) that has served the fewest."""
        candidates = [m for m in [self.holder, *self.copies] if m and m != requester and m not in exclude]
        candidates = list(dict.fromkeys(candidates))
        if not candidates:
            return L2_HOLDER
        if self.holder in candidates and self.copies.get(self.holder, 0) < fanout:
            choice = self.holder
        else:
            choice = min(candidates, key=lambda m: (self.copies.get(m, 0), m != self.holder))
        self.copies[choice] = self.copies.get(choice, 0) + 1
        self.copies.setdefault(requester, 0)
        return choice


def merge(existing: MetaRecord | None, incoming: MetaRecord, authoritative: bool) -> MetaRecord:
    """The record to keep: a newer version wins; for the same version an authoritative
    copy (from the owner) replaces ours, otherwise ours stays and copies are merged."""
    if existing is None or incoming.ver > existing.ver or (authoritative and incoming.ver == existing.ver):
        return incoming
    if incoming.ver == existing.ver:
        for m, n in incoming.copies.items():
            existing.copies[m] = max(existing.copies.get(m, 0), n)
    return existing


def pack_records(records: list[MetaRecord]) -> bytes:
    return msgpack.packb([r.to_wire() for r in records], use_bin_type=True)


def unpack_records(data: memoryview | bytes | None) -> list[MetaRecord]:
    if not data:
        return []
    return [MetaRecord.from_wire(r) for r in msgpack.unpackb(bytes(data), raw=False)]
