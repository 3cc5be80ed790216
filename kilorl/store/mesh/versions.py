"""Versioned objects across the mesh: one history per published name.

The history of ``name`` (the versions held, newest last) is a metadata record on the
ring owner of ``index_key(name)``, replicated and migrated like every record. Each
version's bytes are an ordinary mesh object under its hidden key, so a reader's worker
pulls one copy through the fan-out relay (the publisher sends a bounded number of
copies) and serves it zero-copy to its local readers. When a version falls out of the
newest ``keep_versions``, its record is deleted: every worker holding a copy drops it
from its table, and the memory returns once that worker's last reader lets go.

Owner-side ops: ``c.ver_reserve`` (the number a publish will use), ``c.ver_commit``,
``c.ver_get`` and ``c.ver_wait`` (a long poll, so ``wait_version`` wakes on commit).

A history outlives the bytes it names when it is replicated on a member that survived the
worker holding them (a worker killed and restarted empty, maybe under its old member id
before the others saw it go). A publish of the newest number is then a *restore*: the owner
finds no live copy of that version (``bytes_lost``) and lets the number be written again, in
place, without appending to the history. Without it the publisher's republish of the
version its readers wait for was refused as "not newer", and they waited for bytes no worker
held (``tests/store/test_store_mesh_versions.py``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest, KeyNotFound, StoreError, StoreTimeout, VersionGone
from kilorl.store.local.entries import ReadHandle
from kilorl.store.local.versions import version_key
from kilorl.store.mesh.ops import replicate
from kilorl.store.mesh.records import L2_HOLDER, MetaRecord, new_version
from kilorl.store.server.request import Reply, arg
from kilorl.store.server.version_book import VersionBook

if TYPE_CHECKING:
    from kilorl.store.mesh.node import MeshNode
    from kilorl.store.server.worker import Connection, Worker

log = logging.getLogger("kilorl.store.mesh.versions")

INDEX = "\x00vindex/"
WAIT_SLICE_S = 2.0  # one long poll; the caller repeats it (and so follows ring changes)


def index_key(name: str) -> str:
    return INDEX + name


class VersionIndex:
    """The owner's side: histories in the node's record table, and a condition to wait on."""

    def __init__(self, node: MeshNode):
        self.node = node
        self.changed = threading.Condition(node.lock)
        self.waiters = 0  # long polls blocked here now (status: a test can see a reader waiting)

    def held(self, name: str) -> list[int]:
        with self.node.lock:
            rec = self.node.records.get(index_key(name))
            return list(rec.meta.get("held", [])) if rec is not None else []

    def reserve(self, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
        name, version = arg(h, "name", str), arg(h, "version", int, None)
        held = self.held(name)
        if version is None:
            return {"version": (held[-1] if held else 0) + 1}
        if held and version <= held[-1]:
            if version == held[-1] and self.bytes_lost(version_key(name, version)):
                return {"version": version, "restore": True}
            raise InvalidRequest(f"version: {name!r} is at version {held[-1]}; {version} is not newer")
        return {"version": version}

    def bytes_lost(self, hidden: str) -> bool:
        """No live worker holds the version under ``hidden`` at its record's number, and it is
        not durable (a durable version is read back from L2)."""
        try:  # the record from its owners, else from any worker holding the bytes (a migration in flight)
            located = self.node.reads.lookup(hidden, set(), register=False)
        except StoreError:
            return False  # nobody can say now: refuse as before, the caller retries
        if located is None:
            return self.node.copies.version(hidden) is None
        rec = located.rec
        if rec.durable:
            return False
        live = self.node.membership.view.members
        for member in dict.fromkeys([rec.holder, *rec.copies]):
            if member not in live:
                continue
            try:
                got = self.node.call_member(member, {"op": "c.has", "key": hidden}).get("rec")
            except StoreError:
                continue
            if got is not None and MetaRecord.from_wire(got).ver == rec.ver:
                return False
        return True

    def commit(self, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
        name, version, keep = arg(h, "name", str), arg(h, "version", int), max(1, arg(h, "keep", int))
        key = index_key(name)
        with self.changed:
            rec = self.node.records.get(key)
            held = list(rec.meta.get("held", [])) if rec is not None else []
            if held and version == held[-1] and arg(h, "restore", bool, False):
                self.changed.notify_all()  # the bytes of the newest version are back: nothing to append
                return {"held": held}
            if held and version <= held[-1]:
                raise InvalidRequest(f"version: {name!r} is at version {held[-1]}; {version} is not newer")
            held.append(version)
            retired, held = held[:-keep], held[-keep:]
            new = MetaRecord(key, new_version(rec.ver if rec else 0), L2_HOLDER, 0, {"held": held})
            self.node.records[key] = new
            self.changed.notify_all()
        replicate(self.node, key, new.to_wire())
        for v in retired:
            hidden = version_key(name, v)
            try:
                self.node.meta_call(hidden, {"op": "c.meta_del", "key": hidden})
            except StoreError:
                pass  # its holders drop it when they learn of a newer record, or die with it
        return {"held": held}

    def get(self, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
        return {"held": self.held(arg(h, "name", str))}

    def wait(self, h: dict[str, Any], _payload: Any) -> dict[str, Any]:
        name, min_version = arg(h, "name", str), arg(h, "min_version", int)
        deadline = time.monotonic() + min(float(arg(h, "timeout", (int, float), WAIT_SLICE_S)), WAIT_SLICE_S)
        with self.changed:
            self.waiters += 1
            try:
                while True:
                    held = self.held(name)
                    if held and held[-1] >= min_version:
                        return {"latest": held[-1], "reached": True}
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return {"latest": held[-1] if held else None, "reached": False}
                    # Re-check at least twice a second: a history can also arrive by migration.
                    self.changed.wait(min(left, 0.5))
            finally:
                self.waiters -= 1


class MeshVersions(VersionBook):
    """The book a mesh worker's handlers use: every question goes to the name's owner."""

    def __init__(self, node: MeshNode, keep: int):
        self.node = node
        self.keep = keep
        self._restoring: set[tuple[str, int]] = set()
        """(name, version) this worker is writing again because the owner found its bytes lost."""

    def _ask(self, name: str, op: str, **fields: Any) -> dict[str, Any]:
        return self.node.meta_call(index_key(name), {"op": op, "name": name, **fields})

    def reserve(self, name: str, version: int | None) -> int:
        resp = self._ask(name, "c.ver_reserve", version=version)
        if resp.get("restore"):
            with self.node.lock:
                self._restoring.add((name, resp["version"]))
        return resp["version"]

    def commit(self, name: str, version: int, key: str) -> list[str]:
        self.node.announce(key)  # the bytes become a mesh object others can pull
        with self.node.lock:
            restore = (name, version) in self._restoring
            self._restoring.discard((name, version))
        try:
            self._ask(name, "c.ver_commit", version=version, keep=self.keep, **({"restore": True} if restore else {}))
        except InvalidRequest:  # a concurrent publisher got there first
            self.node.meta_call(key, {"op": "c.meta_del", "key": key})
            raise
        return []

    def latest(self, name: str) -> int | None:
        held = self._ask(name, "c.ver_get")["held"]
        return held[-1] if held else None

    def resolve(self, name: str, version: int | None) -> int:
        held = self._ask(name, "c.ver_get")["held"]
        if version is None:
            if not held:
                raise VersionGone(f"{name!r} has no published version")
            return held[-1]
        if version not in held:
            raise VersionGone(f"{name!r} version {version} is not held (held: {held})")
        return version

    def wait(self, name: str, min_version: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE_S if deadline is None else max(0.0, deadline - time.monotonic())
            resp = self._ask(name, "c.ver_wait", min_version=min_version, timeout=min(left, WAIT_SLICE_S))
            if resp["reached"]:
                return resp["latest"]
            if deadline is not None and time.monotonic() >= deadline:
                raise StoreTimeout(f"{name!r} did not reach version {min_version} within {timeout}s "
                                   f"(latest: {resp['latest']})")

    def make_local(self, key: str) -> None:
        self.node.ensure_local(key, None)

    def fetch_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[ReadHandle] | None:
        handles: list[ReadHandle] = []
        try:
            for off, length in ranges:
                handle = self.node.read_range(key, off, length)
                if handle is None:
                    raise KeyNotFound(f"{key!r} not found")
                handles.append(handle)
        except BaseException:
            self.node.store.release([h.region for h in handles if h.region is not None])
            raise
        return handles


def register(worker: Worker, node: MeshNode) -> None:
    """Adds the ``c.ver_*`` ops and makes the mesh history the worker's version book."""
    index = VersionIndex(node)
    ops: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
        "c.ver_reserve": index.reserve, "c.ver_commit": index.commit, "c.ver_get": index.get,
        "c.ver_wait": index.wait}
    for name, fn in ops.items():
        worker.register(name, functools.partial(_handler, fn))
        node.links.local_ops[name] = fn
    node.book = MeshVersions(node, worker.rc.spec.keep_versions)
    node.status_parts.append(lambda: {"version_waiters": index.waiters})
    node.on_joined.append(functools.partial(recover_from_l2, worker, node))


def recover_from_l2(worker: Worker, node: MeshNode) -> int:
    """Versions this worker found in its L2 directory at start (durable publishes from before
    a restart) go back into the mesh history, oldest first, so readers find them again.

    A version whose name the mesh already holds at that number or newer (published while
    this worker was down) stays out: versions stay monotonic. Returns how many came back.
    """
    keep = worker.rc.spec.keep_versions
    with worker.versions.cond:
        found = {name: list(vs) for name, vs in worker.versions.versions.items()}
    recovered = 0
    for name, versions in found.items():
        for v in versions:
            key = version_key(name, v)
            try:
                if not node.announce(key, if_absent=True):
                    continue  # the mesh has a record of this version already
                node.meta_call(index_key(name), {"op": "c.ver_commit", "name": name, "version": v, "keep": keep})
                recovered += 1
            except InvalidRequest:
                continue  # the history moved past it while this worker was down
    with node.lock:
        node.counters["versions_recovered"] += recovered
    if recovered:
        log.info("recovered %d durable versions from L2 into the mesh history", recovered)
    return recovered


def _handler(fn: Callable[[dict[str, Any], Any], dict[str, Any]], w: Worker, conn: Connection,
             h: dict[str, Any]) -> Reply:
    payload = conn.fs.read_payload() if conn.fs.pending_payload else None
    return Reply(fn(h, payload))
