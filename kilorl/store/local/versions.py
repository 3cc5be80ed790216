"""Versioned objects (parameters): publish / latest_version / get_version / wait_version.

Each version is an ordinary immutable object under a hidden key, so tiers, leases and
L2 apply unchanged. A reader gets one whole version through one lease, hence never a
torn mix of two; the table keeps the newest ``keep`` versions and deletes older ones,
whose memory returns to the arena when the last reader releases its lease.
"""

from __future__ import annotations

import threading
import time

from kilorl.store.errors import InvalidRequest, StoreTimeout, VersionGone

HIDDEN = "\x00ver/"


def version_key(name: str, version: int) -> str:
    return f"{HIDDEN}{name}/{version:020d}"


def parse_version_key(key: str) -> tuple[str, int] | None:
    if not key.startswith(HIDDEN):
        return None
    name, _, v = key[len(HIDDEN):].rpartition("/")
    return (name, int(v)) if v.isdigit() else None


class VersionTable:
    """Which versions of each name exist; waiters block on a condition."""

    def __init__(self, keep: int):
        self.keep = max(1, keep)
        self.cond = threading.Condition()
        self.versions: dict[str, list[int]] = {}

    def check_new(self, name: str, version: int) -> None:
        if not isinstance(version, int) or version < 0:
            raise InvalidRequest(f"version: must be a non-negative int, got {version!r}")
        with self.cond:
            latest = self._latest(name)
            if latest is not None and version <= latest:
                raise InvalidRequest(f"version: {name!r} is at version {latest}; {version} is not newer")

    def _latest(self, name: str) -> int | None:
        vs = self.versions.get(name)
        return vs[-1] if vs else None

    def add(self, name: str, version: int) -> list[str]:
        """Records a stored version; returns the hidden keys of versions to reclaim."""
        with self.cond:
            vs = self.versions.setdefault(name, [])
            if vs and version <= vs[-1]:
                # A concurrent publisher won; this one is reclaimed at once.
                return [version_key(name, version)]
            vs.append(version)
            old, self.versions[name] = vs[:-self.keep], vs[-self.keep:]
            self.cond.notify_all()
            return [version_key(name, v) for v in old]

    def latest(self, name: str) -> int | None:
        with self.cond:
            return self._latest(name)

    def resolve(self, name: str, version: int | None) -> str:
        with self.cond:
            if version is None:
                latest = self._latest(name)
                if latest is None:
                    raise VersionGone(f"{name!r} has no published version")
                return version_key(name, latest)
            if version not in self.versions.get(name, ()):
                raise VersionGone(f"{name!r} version {version} is not held (held: {self.versions.get(name, [])})")
            return version_key(name, version)

    def wait(self, name: str, min_version: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while True:
                latest = self._latest(name)
                if latest is not None and latest >= min_version:
                    return latest
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise StoreTimeout(f"{name!r} did not reach version {min_version} within {timeout}s "
                                       f"(latest: {latest})")
                self.cond.wait(remaining)

    def rebuild(self, keys: list[str]) -> list[str]:
        """Re-creates the table from recovered hidden keys; returns surplus keys to reclaim."""
        found: dict[str, list[int]] = {}
        for k in keys:
            parsed = parse_version_key(k)
            if parsed:
                found.setdefault(parsed[0], []).append(parsed[1])
        surplus = []
        with self.cond:
            for name, vs in found.items():
                vs.sort()
                self.versions[name] = vs[-self.keep:]
                surplus += [version_key(name, v) for v in vs[:-self.keep]]
        return surplus

    def names(self) -> dict[str, int]:
        with self.cond:
            return {n: vs[-1] for n, vs in self.versions.items() if vs}
