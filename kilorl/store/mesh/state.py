"""Cluster state kept in the metastore: member records, the ring with its epoch, and ring updates.

Key layout under ``MembershipConfig.prefix``: ``members/<id>`` (a ``MemberInfo``
attached to the member's lease) and ``ring`` (``{epoch, vnodes, members}``).
``update_ring`` is the only writer of the ring: a compare-and-swap loop, so
concurrent changes serialize and each bumps the epoch by exactly one.
See ``kilorl.store.mesh.membership`` for the protocol built on it.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from kilorl.store.mesh.ring import DEFAULT_VNODES, HashRing, RangeMove, diff, validate_member_id
from kilorl.store.metastore.base import KeyValue, Metastore

log = logging.getLogger(__name__)


class MembershipError(Exception):
    """A membership operation could not complete."""


class MemberIdInUse(MembershipError):
    """Another live member already registered this id."""


class MalformedRing(MembershipError):
    """The committed ring record cannot be decoded (written by something else, or corrupted)."""


@dataclass
class MembershipConfig:
    """Where the cluster lives in the metastore and how fast failures are detected."""

    prefix: str = "/kilorl/store/default/"
    """Key prefix of this cluster; different clusters may share one metastore."""
    lease_ttl: float = 3.0
    """Seconds without a heartbeat before a member is declared dead (etcd's minimum is 2)."""
    replicas: int = 1
    """Preference-list length used when reporting moved ranges (1: primary only)."""
    vnodes: int = DEFAULT_VNODES
    """Ring points per unit of member weight."""
    cas_timeout: float = 30.0
    """Give up a ring update that keeps losing compare-and-swap races after this many seconds."""

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/"):
            raise ValueError(f"prefix must end with '/', got {self.prefix!r}")
        if not self.lease_ttl > 0:
            raise ValueError(f"lease_ttl must be > 0, got {self.lease_ttl!r}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas!r}")

    @property
    def ring_key(self) -> bytes:
        return f"{self.prefix}ring".encode()

    @property
    def members_prefix(self) -> bytes:
        return f"{self.prefix}members/".encode()

    def member_key(self, member_id: str) -> bytes:
        return self.members_prefix + member_id.encode()


@dataclass(frozen=True)
class MemberInfo:
    """What other members need to reach a member."""

    id: str
    address: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        validate_member_id(self.id)
        if not isinstance(self.address, str) or not self.address:
            raise ValueError(f"address of member {self.id!r} must be a non-empty string")
        if not self.weight > 0:
            raise ValueError(f"weight of member {self.id!r} must be > 0, got {self.weight!r}")

    def to_bytes(self) -> bytes:
        return json.dumps({"id": self.id, "address": self.address, "weight": self.weight}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> MemberInfo:
        raw = json.loads(data)
        return cls(raw["id"], raw["address"], float(raw.get("weight", 1.0)))


@dataclass(frozen=True)
class RingState:
    """A committed ring: ``epoch`` counts changes; ``revision`` is the ring key's mod_revision."""

    epoch: int
    ring: HashRing
    revision: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps({"epoch": self.epoch, **self.ring.to_dict()}, sort_keys=True).encode()

    @classmethod
    def from_kv(cls, kv: KeyValue | None, vnodes: int = DEFAULT_VNODES) -> RingState:
        if kv is None:
            return cls(0, HashRing((), vnodes), 0)
        try:
            raw = json.loads(kv.value)
            return cls(int(raw["epoch"]), HashRing.from_dict(raw), kv.mod_revision)
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedRing(f"ring record at {kv.key!r} (revision {kv.mod_revision}) is malformed: {exc}") from exc


@dataclass(frozen=True)
class RingChange:
    """One epoch step, with the ranges whose holders changed (see ``ring.diff``)."""

    old: RingState
    new: RingState
    moves: list[RangeMove]

    @property
    def joined(self) -> list[str]:
        return [m for m in self.new.ring.members if m not in self.old.ring]

    @property
    def left(self) -> list[str]:
        return [m for m in self.old.ring.members if m not in self.new.ring]


def live_members(kvs: list[KeyValue], config: MembershipConfig) -> dict[str, MemberInfo]:
    out = {}
    for kv in kvs:
        if kv.key.startswith(config.members_prefix):
            try:
                info = MemberInfo.from_bytes(kv.value)
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed member record %r", kv.key)
                continue
            out[info.id] = info
    return out


@dataclass(frozen=True)
class RingUpdate:
    """Result of ``update_ring``: the state it replaced and the state now committed."""

    old: RingState
    new: RingState

    @property
    def changed(self) -> bool:
        return self.new.epoch != self.old.epoch

    def change(self, replicas: int = 1) -> RingChange:
        return RingChange(self.old, self.new, diff(self.old.ring, self.new.ring, replicas))


def update_ring(
    store: Metastore,
    config: MembershipConfig,
    mutate: Callable[[HashRing, dict[str, MemberInfo]], HashRing],
) -> RingUpdate:
    """Apply ``mutate`` to the committed ring with a compare-and-swap loop.

    ``mutate`` gets the current ring and the live members (read in one snapshot)
    and returns the wanted ring; members without a live record are always dropped.
    The returned ``old`` is exactly the state the swap replaced.
    """
    deadline = time.monotonic() + config.cas_timeout
    attempt = 0
    while True:
        snapshot = store.range(config.prefix.encode())
        ring_kv = next((kv for kv in snapshot.kvs if kv.key == config.ring_key), None)
        current = RingState.from_kv(ring_kv, config.vnodes)
        live = live_members(snapshot.kvs, config)
        wanted = mutate(current.ring, live)
        for member in wanted.members:
            if member not in live:
                wanted = wanted.without_member(member)
        if wanted == current.ring:
            return RingUpdate(current, current)
        proposal = RingState(current.epoch + 1, wanted)
        result = store.compare_and_swap(config.ring_key, current.revision, proposal.to_bytes())
        if result.succeeded:
            committed = RingState(proposal.epoch, wanted, result.current.mod_revision if result.current else 0)
            return RingUpdate(current, committed)
        attempt += 1
        if time.monotonic() > deadline:
            raise MembershipError(f"ring update kept losing races for {config.cas_timeout}s ({attempt} attempts)")
        time.sleep(random.uniform(0, min(0.05, 0.002 * attempt)))  # de-synchronize contenders


def reconcile(store: Metastore, config: MembershipConfig) -> RingUpdate:
    """Drop ring members whose lease expired; a no-op when the ring is consistent."""
    return update_ring(store, config, lambda ring, live: ring)
