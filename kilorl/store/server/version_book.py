"""Who keeps the history of published names: this worker alone, or the mesh.

A ``VersionBook`` answers the version questions the handlers ask (reserve a number,
commit it, resolve, wait, bring a version's bytes here). ``LocalVersionBook`` is a
worker alone: its ``VersionTable``. A multi-node router returns its own book from
``Router.versions()``, which keeps one history per name for the whole mesh.
"""

from __future__ import annotations

from kilorl.store.errors import InvalidRequest
from kilorl.store.local.entries import ReadHandle
from kilorl.store.local.versions import VersionTable, parse_version_key


class VersionBook:
    """The version history of published names, as the handlers see it."""

    def reserve(self, name: str, version: int | None) -> int:
        """The version number a publish of ``name`` will use (``version``, checked newer,
        or the next one after the latest)."""
        raise NotImplementedError

    def commit(self, name: str, version: int, key: str) -> list[str]:
        """The bytes of ``version`` are stored locally under ``key``: make it the latest.
        Returns hidden keys whose local copies are to be reclaimed now."""
        raise NotImplementedError

    def latest(self, name: str) -> int | None:
        raise NotImplementedError

    def resolve(self, name: str, version: int | None) -> int:
        """``version`` if it is held (else ``VersionGone``); the latest when None."""
        raise NotImplementedError

    def wait(self, name: str, min_version: int, timeout: float | None) -> int:
        raise NotImplementedError

    def make_local(self, key: str) -> None:
        """Brings the bytes of a version (hidden ``key``) to this worker if they are elsewhere."""

    def fetch_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[ReadHandle] | None:
        """Only those byte ranges of a version held elsewhere; None if it is held here."""
        return None


class LocalVersionBook(VersionBook):
    """A worker alone: the history is its own ``VersionTable``."""

    def __init__(self, table: VersionTable):
        self.table = table

    def reserve(self, name: str, version: int | None) -> int:
        if version is None:
            latest = self.table.latest(name)
            return 1 if latest is None else latest + 1
        self.table.check_new(name, version)
        return version

    def commit(self, name: str, version: int, key: str) -> list[str]:
        reclaim = self.table.add(name, version)
        if key in reclaim:  # a concurrent publisher committed a newer version first
            raise InvalidRequest(f"version: {name!r} moved past {version} while it was written")
        return reclaim

    def latest(self, name: str) -> int | None:
        return self.table.latest(name)

    def resolve(self, name: str, version: int | None) -> int:
        parsed = parse_version_key(self.table.resolve(name, version))
        assert parsed is not None
        return parsed[1]

    def wait(self, name: str, min_version: int, timeout: float | None) -> int:
        return self.table.wait(name, min_version, timeout)
