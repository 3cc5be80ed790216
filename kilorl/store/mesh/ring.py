"""Consistent-hash ring with weighted virtual nodes, and the diff between two rings.

The ring decides which store worker owns each key's metadata. Each member gets
``round(vnodes * weight)`` points on a 64-bit circle; a key belongs to the first
point strictly after the key's position (wrapping), so a point at position ``p``
owns the half-open range ``[previous point, p)``. Every ``KeyRange`` this module
returns is such a non-wrapping half-open interval inside ``[0, 2**64)``.

Why our own ring and not a library: ``uhashring`` (the well-kept PyPI option) was
evaluated. It hashes ``str(key)`` (bytes keys would hash as ``"b'...'"``), takes
integer weights only, resolves colliding points by insertion order (two processes
that add the same members in a different order can disagree), and exposes no
range-level view, so the diff that drives handoff would have to be rebuilt on its
private point list anyway. What we need is about 200 lines over ``bisect``:

- positions are ``blake2b(digest_size=8)`` big-endian integers: stable across
  processes, machines and Python versions (never ``hash()``);
- point collisions are broken by member id, so a ring is a pure function of
  ``(members, weights, vnodes)`` and can be rebuilt from its JSON form anywhere;
- ``diff(old, new, replicas)`` returns exactly the ranges whose owner (or
  replica set) changed, with the members that held and will hold them.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

RING_BITS = 64
RING_SIZE = 1 << RING_BITS
DEFAULT_VNODES = 256
_MEMBER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")


def key_position(key: bytes | str) -> int:
    """Position of a key on the ring: the first 8 bytes of blake2b, big-endian."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"key must be bytes or str, got {type(key).__name__}")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _vnode_position(member: str, index: int) -> int:
    return key_position(f"{member}#{index}".encode())


def validate_member_id(member: str) -> str:
    """Member ids go into metastore keys and log lines: keep them short and plain."""
    if not isinstance(member, str) or not _MEMBER_ID.match(member):
        raise ValueError(
            f"member id {member!r} is invalid: use 1-128 characters from [A-Za-z0-9._:-], "
            "starting with a letter or digit"
        )
    return member


@dataclass(frozen=True)
class KeyRange:
    """Half-open range ``[start, end)`` of ring positions owned by ``owner``."""

    start: int
    end: int
    owner: str

    def __contains__(self, position: int) -> bool:
        return self.start <= position < self.end

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RangeMove:
    """A range whose holders change between two rings.

    ``old_owners`` / ``new_owners`` are the preference lists (primary first) of
    the range before and after; with ``replicas=1`` each has one member.
    """

    start: int
    end: int
    old_owners: tuple[str, ...]
    new_owners: tuple[str, ...]

    def __contains__(self, position: int) -> bool:
        return self.start <= position < self.end

    @property
    def source(self) -> str | None:
        """The old primary: the member that hands the range off (None if the ring was empty)."""
        return self.old_owners[0] if self.old_owners else None

    @property
    def target(self) -> str | None:
        """The new primary: the member that takes the range over (None if the ring is now empty)."""
        return self.new_owners[0] if self.new_owners else None

    @property
    def gained(self) -> tuple[str, ...]:
        """Members that hold the range after but not before: they must receive its data."""
        return tuple(m for m in self.new_owners if m not in self.old_owners)

    @property
    def released(self) -> tuple[str, ...]:
        """Members that held the range before but not after: they may drop its data."""
        return tuple(m for m in self.old_owners if m not in self.new_owners)

    @property
    def size(self) -> int:
        return self.end - self.start


class HashRing:
    """An immutable weighted consistent-hash ring.

    Immutable on purpose: a ring is a value committed to the metastore with an
    epoch; a membership change builds a new ring and the two are diffed.
    """

    def __init__(self, members: Mapping[str, float] | Iterable[str] = (), vnodes: int = DEFAULT_VNODES):
        if not isinstance(vnodes, int) or isinstance(vnodes, bool) or not 1 <= vnodes <= 65536:
            raise ValueError(f"vnodes must be an int in [1, 65536], got {vnodes!r}")
        if not isinstance(members, Mapping):
            members = {m: 1.0 for m in members}
        weights: dict[str, float] = {}
        for member, weight in members.items():
            validate_member_id(member)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (
                math.isfinite(weight) and weight > 0
            ):
                raise ValueError(f"weight of member {member!r} must be a finite number > 0, got {weight!r}")
            weights[member] = float(weight)
        self._weights = dict(sorted(weights.items()))
        self._vnodes = vnodes
        # Sorting by (position, member) and keeping the first of equal positions makes
        # collisions resolve by member id, independent of insertion order.
        points = sorted(
            (_vnode_position(member, i), member)
            for member, weight in self._weights.items()
            for i in range(self.vnode_count(member))
        )
        positions: list[int] = []
        owners: list[str] = []
        for position, member in points:
            if positions and positions[-1] == position:
                continue
            positions.append(position)
            owners.append(member)
        self._positions = positions
        self._owners = owners

    # -- construction and serialization ------------------------------------------------

    @property
    def vnodes(self) -> int:
        return self._vnodes

    @property
    def weights(self) -> dict[str, float]:
        return dict(self._weights)

    @property
    def members(self) -> list[str]:
        return list(self._weights)

    def vnode_count(self, member: str) -> int:
        """Points a member gets: ``vnodes * weight`` rounded, at least one."""
        return max(1, round(self._vnodes * self._weights[member]))

    def with_member(self, member: str, weight: float = 1.0) -> HashRing:
        """A new ring with ``member`` added (or its weight changed)."""
        return HashRing({**self._weights, member: weight}, self._vnodes)

    def without_member(self, member: str) -> HashRing:
        """A new ring without ``member`` (unchanged if absent)."""
        return HashRing({m: w for m, w in self._weights.items() if m != member}, self._vnodes)

    def to_dict(self) -> dict[str, Any]:
        return {"vnodes": self._vnodes, "members": dict(self._weights)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HashRing:
        if not isinstance(data, Mapping):
            raise ValueError(f"ring must be a mapping, got {type(data).__name__}")
        members = data.get("members")
        vnodes = data.get("vnodes", DEFAULT_VNODES)
        if not isinstance(members, Mapping):
            raise ValueError("ring field 'members' must be a mapping of member id to weight")
        return cls(members, vnodes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashRing) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self._vnodes, tuple(self._weights.items())))

    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, member: object) -> bool:
        return member in self._weights

    def __repr__(self) -> str:
        return f"HashRing(members={self._weights!r}, vnodes={self._vnodes})"

    # -- lookups -----------------------------------------------------------------------

    def _index_after(self, position: int) -> int:
        if not self._positions:
            raise LookupError("the ring has no members")
        return bisect.bisect_right(self._positions, position) % len(self._positions)

    def owner_of_position(self, position: int) -> str:
        return self._owners[self._index_after(position)]

    def owner(self, key: bytes | str) -> str:
        """The member that owns ``key``'s metadata."""
        return self.owner_of_position(key_position(key))

    def successors_of_position(self, position: int, n: int) -> list[str]:
        """Up to ``n`` distinct members walking clockwise from ``position`` (primary first)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        want = min(n, len(self._weights))
        start = self._index_after(position)
        found: list[str] = []
        count = len(self._positions)
        for step in range(count):
            member = self._owners[(start + step) % count]
            if member not in found:
                found.append(member)
                if len(found) == want:
                    break
        return found

    def successors(self, key: bytes | str, n: int) -> list[str]:
        """The preference list of ``key``: its owner then the next distinct members (replicas)."""
        return self.successors_of_position(key_position(key), n)

    # -- range views -------------------------------------------------------------------

    def boundaries(self) -> list[int]:
        """Sorted point positions (every place where ownership may change)."""
        return list(self._positions)

    def ranges(self) -> Iterator[KeyRange]:
        """All owned ranges, non-wrapping, covering ``[0, 2**64)`` exactly once, merged."""
        if not self._positions:
            return
        cuts = [0, *self._positions, RING_SIZE]
        pending: KeyRange | None = None
        for start, end in zip(cuts, cuts[1:]):
            if start == end:
                continue
            owner = self.owner_of_position(start)
            if pending is not None and pending.owner == owner and pending.end == start:
                pending = KeyRange(pending.start, end, owner)
                continue
            if pending is not None:
                yield pending
            pending = KeyRange(start, end, owner)
        if pending is not None:
            yield pending

    def ranges_of(self, member: str) -> list[KeyRange]:
        return [r for r in self.ranges() if r.owner == member]

    def ownership(self) -> dict[str, float]:
        """Fraction of the hash space each member owns (sums to 1)."""
        shares = {m: 0 for m in self._weights}
        for r in self.ranges():
            shares[r.owner] += r.size
        return {m: s / RING_SIZE for m, s in shares.items()}


def diff(old: HashRing, new: HashRing, replicas: int = 1) -> list[RangeMove]:
    """Ranges whose preference list (first ``replicas`` members) differs between rings.

    Positions not covered by any returned move keep exactly the same holders, so
    handing off the returned ranges is sufficient for a membership change.
    Adjacent ranges with identical before/after holders are merged.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    cuts = sorted({0, RING_SIZE, *old.boundaries(), *new.boundaries()})
    moves: list[RangeMove] = []
    for start, end in zip(cuts, cuts[1:]):
        before = tuple(old.successors_of_position(start, replicas)) if len(old) else ()
        after = tuple(new.successors_of_position(start, replicas)) if len(new) else ()
        if before == after:
            continue
        last = moves[-1] if moves else None
        if last is not None and last.end == start and last.old_owners == before and last.new_owners == after:
            moves[-1] = RangeMove(last.start, end, before, after)
        else:
            moves.append(RangeMove(start, end, before, after))
    return moves


def find_move(moves: list[RangeMove], position: int) -> RangeMove | None:
    """The move covering ``position`` in a sorted diff, or None (binary search)."""
    i = bisect.bisect_right(moves, position, key=lambda m: m.start) - 1
    if i >= 0 and position in moves[i]:
        return moves[i]
    return None
