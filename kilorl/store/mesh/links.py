"""How a mesh worker reaches the others: preference lists on the ring, member calls.

A call addressed to this worker itself runs its ``c.*`` op in-process (``local_ops``,
filled in by ``ops.register``), so the owner of a key never talks to itself by socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kilorl.store.errors import ConnectionLost, StoreTimeout, WorkerLeaving
from kilorl.store.mesh.membership import Membership
from kilorl.store.wire.peers import PeerPool, PeerUnreachable

LocalOp = Callable[[dict[str, Any], Any], dict[str, Any]]


class MeshLinks:
    """Ring lookups and calls to members (or to this worker's own ops)."""

    def __init__(self, member_id: str, membership: Membership, pool: PeerPool, get_timeout: float):
        self.id = member_id
        self.membership = membership
        self.pool = pool
        self.get_timeout = get_timeout
        self.local_ops: dict[str, LocalOp] = {}

    def preference(self, key: str) -> list[str]:
        """The key's metadata owner and its replica."""
        ring = self.membership.view.ring
        return ring.successors(key, 2) if len(ring) else [self.id]

    def address_of(self, member: str) -> str:
        info = self.membership.view.members.get(member)
        if info is None:
            raise PeerUnreachable(f"member {member} is not live")
        return info.address

    def live(self) -> dict[str, str]:
        """member id -> address of every live member."""
        return {m: i.address for m, i in self.membership.view.members.items()}

    def call_member(self, member: str, header: dict[str, Any], payload: bytes | None = None) -> dict[str, Any]:
        if member == self.id:
            return self.local_ops[header["op"]](header, payload)
        return self.pool.call(self.address_of(member), header, [payload] if payload else [])

    def meta_call(self, key: str, header: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        """Sends a metadata request to the key's owner (or its replica if the owner is down),
        retrying with a refreshed ring until ``deadline``."""
        deadline = deadline or time.monotonic() + self.get_timeout
        last: Exception | None = None
        while True:
            for member in self.preference(key):
                try:
                    return self.call_member(member, header)
                except (ConnectionLost, WorkerLeaving) as exc:
                    last = exc
            if time.monotonic() > deadline:
                raise StoreTimeout(f"no metadata owner of {key!r} reachable: {last}")
            time.sleep(0.05)
