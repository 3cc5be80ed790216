"""Which published tensors an actor refreshes at each version (``sync.mode`` and ``sync.groups``).

``sync`` and ``async`` refresh everything each time the actor takes a new version (they
differ in *which* version the loop asks for). ``hybrid`` splits the tensors by name prefix:
``sync`` groups are refreshed at every new version, ``async`` groups only once the copy the
actor holds is more than ``max_staleness`` versions old, so their bytes move less often.
"""

from __future__ import annotations

from collections.abc import Mapping


class SyncGroups:
    """The per-group versions one actor holds, and what to fetch for a new version."""

    def __init__(self, names: list[str], mode: str, groups: Mapping[str, str], max_staleness: int) -> None:
        self.max_staleness = max_staleness
        self.mode_of = {n: _mode(n, groups) if mode == "hybrid" else "sync" for n in names}
        self.held: dict[str, int | None] = {"sync": None, "async": None}
        """Version each group was last refreshed at (None: never)."""

    def wanted(self, newest: int) -> list[str]:
        """Tensors to fetch to act with ``newest``: every sync tensor, async ones when too old."""
        held = self.held["async"]
        refresh_async = held is None or newest - held > self.max_staleness
        return [n for n, m in self.mode_of.items() if m == "sync" or refresh_async]

    def took(self, version: int, names: list[str]) -> None:
        for group in {self.mode_of[n] for n in names}:
            self.held[group] = version


def _mode(name: str, groups: Mapping[str, str]) -> str:
    """The mode of the longest prefix of ``name`` in ``groups`` (``sync`` when none matches)."""
    best = max((p for p in groups if name.startswith(p)), key=len, default=None)
    return "sync" if best is None else groups[best]
