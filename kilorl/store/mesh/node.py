"""A store worker as a member of a cluster: ring membership, metadata ownership, remote reads.

``MeshNode`` is the worker's router (``server/router.py``) and a worker service. It joins
the ring through ``membership.py`` on a metastore (built-in on the ``--head`` worker, or
etcd), keeps the metadata records (``records.py``) of the keys the ring gives it (owner
+ one replica: ``successors(key, 2)``), and answers the router hooks the worker's
``set``/``get``/``delete`` handlers call, so that any worker serves any key:

- a ``set`` stores the bytes locally, then registers them with the key's owner, which
  assigns the cluster version and invalidates older copies elsewhere;
- a ``get`` of a key this worker lacks asks the owner where it lives and pulls it
  (``transfer.py``), keeping it as a local replica until a newer version invalidates it;
- on every ring change, records whose preference list changed are sent to their new
  owners; when a member's lease ends its records' holders become L2 (durable) or lost;
- a graceful leave refuses new writes, hands records and held objects to the new owners,
  then revokes its lease.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kilorl.store.errors import (
    ConfigError,
    ConnectionLost,
    StoreError,
    WorkerLeaving,
)
from kilorl.store.local.entries import ReadHandle, Region
from kilorl.store.mesh.copies import LocalCopies
from kilorl.store.mesh.links import MeshLinks
from kilorl.store.mesh.membership import Membership
from kilorl.store.mesh.metastore_service import MetastoreService
from kilorl.store.mesh.moves import RingMoves
from kilorl.store.mesh.reads import RemoteReads
from kilorl.store.mesh.records import MetaRecord
from kilorl.store.mesh.state import MemberInfo, MembershipConfig
from kilorl.store.metastore import open_metastore
from kilorl.store.metastore.builtin import BuiltinMetastore
from kilorl.store.metastore.remote import RemoteMetastore
from kilorl.store.server.router import Router
from kilorl.store.server.version_book import VersionBook
from kilorl.store.server.worker import Worker
from kilorl.store.wire.peers import PeerPool, PeerUnreachable

log = logging.getLogger("kilorl.store.mesh.node")


@dataclass
class MeshConfig:
    """How a worker takes part in a cluster (all fields have CLI flags on ``store start``)."""

    head: bool = False
    """Host the built-in metastore in this worker (the first worker of a cluster)."""
    join: str | None = None
    """``HOST:PORT`` of the head worker whose built-in metastore this worker uses."""
    metastore: str | None = None
    """``etcd://HOST:PORT``: use etcd; then no worker is special."""
    member_id: str | None = None
    """Member id in the ring (default: the worker's ``host:port``)."""
    lease_ttl: float = 3.0
    """Seconds without heartbeat before a worker is declared dead (etcd: at least 2)."""
    fanout: int = 2
    """Copies a holder serves of one version before readers are pointed at other copies."""
    chunk_size: int = 4 * 1024 * 1024
    """Bytes per chunk of a worker-to-worker transfer."""
    get_timeout: float = 15.0
    """Upper bound on resolving a remote get (lookups, retries, waiting out a holder that
    died or restarts); ``--get-timeout``, which a run sets to ``store.reconnect_timeout_s``."""
    prefix: str = "/kilorl/store/default/"
    """Metastore key prefix of this cluster."""

    def __post_init__(self) -> None:
        chosen = sum([self.head, self.join is not None, self.metastore is not None])
        if chosen != 1:
            raise ConfigError("cluster: give exactly one of --head, --join HOST:PORT, --metastore etcd://HOST:PORT")
        if self.metastore is not None and not self.metastore.startswith("etcd://"):
            raise ConfigError(f"metastore: expected etcd://HOST:PORT, got {self.metastore!r}")
        if not self.lease_ttl > 0:
            raise ConfigError(f"lease_ttl: must be > 0, got {self.lease_ttl}")
        if self.fanout < 1:
            raise ConfigError(f"fanout: must be >= 1, got {self.fanout}")
        if not self.get_timeout > 0:
            raise ConfigError(f"get_timeout: must be > 0, got {self.get_timeout}")


class MeshNode(Router):
    """Mesh membership, metadata and remote reads of one worker (see the module docstring)."""

    def __init__(self, worker: Worker, cfg: MeshConfig):
        shared = worker.rc.spec.token or os.environ.get("KILORL_STORE_TOKEN") or worker.rc.spec.insecure
        if not shared:  # a generated token is known to this worker only: peers could not talk to it
            raise ConfigError("token: cluster workers must share a token (--token or KILORL_STORE_TOKEN) "
                              "or all run --insecure")
        self.w = worker
        self.cfg = cfg
        host = worker.rc.spec.host
        self.address = f"{host}:{worker.port}"
        self.id = cfg.member_id or self.address
        self.store = worker.store
        self.lock = threading.RLock()
        self.records: dict[str, MetaRecord] = {}
        self.copies = LocalCopies(worker.store, self.lock)
        self.pool = PeerPool(worker.token, timeout=max(60.0, cfg.get_timeout * 2))
        self.leaving = threading.Event()
        self._writes = 0
        self._writes_cond = threading.Condition()
        self.counters = {"remote_gets": 0, "remote_ranges": 0, "l2_loads": 0, "records_received": 0,
                         "records_sent": 0, "handed_off": 0, "adopted": 0, "versions_recovered": 0}
        if cfg.head:
            self.metastore = BuiltinMetastore()
            service = MetastoreService(self.metastore)
            service.install(worker)
            worker.add_service(service)
        elif cfg.join is not None:
            self.metastore = RemoteMetastore(cfg.join, worker.token)
        else:
            self.metastore = open_metastore(cfg.metastore)
        self.membership = Membership(self.metastore, MemberInfo(self.id, self.address),
                                     MembershipConfig(cfg.prefix, cfg.lease_ttl, replicas=2))
        self.links = MeshLinks(self.id, self.membership, self.pool, cfg.get_timeout)
        self.reads = RemoteReads(self.links, self.copies, worker.store, self.pool, cfg.chunk_size,
                                 cfg.get_timeout, self.counters, self.lock)
        self.moves = RingMoves(self.records, self.lock, self.links, self.copies, worker.store, self.leaving,
                               self.counters, self.reads.rescue)
        self.book: VersionBook | None = None  # the mesh history (versions.register sets it)
        self.status_parts: list[Callable[[], dict[str, Any]]] = []  # more fields for info()
        self.on_joined: list[Callable[[], None]] = []
        """Run once this worker is in the ring, before it serves (e.g. re-announcing what L2 kept)."""
        worker.set_router(self)
        worker.add_service(self)
        # Objects indexed from a shared L2 directory belong to whoever wrote them: in a
        # cluster they are found through their records, or read from L2 on a miss.
        with worker.store.lock:
            claimed = [k for k, o in worker.store.objects.items() if o.tier is None and not k.startswith("\x00")]
            for key in claimed:
                del worker.store.objects[key]

    # -- lifecycle (worker service) --------------------------------------------------------
    def start(self, worker: Worker) -> None:
        self.membership.view.subscribe(self.moves.changes.put)
        self.membership.view.on_member(self.moves.on_member)
        threading.Thread(target=self.moves.run, name="rebalance", daemon=True).start()
        state = self.membership.join()
        log.info("member %s joined the ring at epoch %d (%d members)", self.id, state.epoch, len(state.ring))
        for hook in self.on_joined:
            hook()

    def drain(self) -> None:
        """Graceful leave: no new writes, then records and held objects go to the new owners."""
        if self.leaving.is_set():
            return
        self.leaving.set()
        with self._writes_cond:
            self._writes_cond.wait_for(lambda: self._writes == 0, timeout=30)
        try:
            self.membership.leave(handoff=self.moves.handoff)
            log.info("member %s left the ring: handed off %d objects and %d records", self.id,
                        self.counters["handed_off"], self.counters["records_sent"])
        except Exception:
            log.exception("graceful leave of %s failed", self.id)

    def stop(self) -> None:
        self.moves.changes.put(None)
        if not self.leaving.is_set():
            self.leaving.set()
            self.membership.abandon()
        self.pool.close()
        if not self.cfg.head:
            self.metastore.close()

    # -- router hooks (the worker's handlers call these) ---------------------------------
    def versions(self) -> VersionBook | None:
        return self.book

    def on_delete(self, keys: list[str], present: set[str], deleted_here: int) -> int:
        n = 0
        for key in keys:
            resp = self.meta_call(key, {"op": "c.meta_del", "key": key})
            n += bool(resp["found"] or key in present)
            if resp.get("prev_l2") and self.store.l2 is not None:
                self.store.l2.delete(key)
        return n

    def describe_remote(self, key: str) -> tuple[dict[str, Any], int] | None:
        return self.reads.describe(key)

    def read_range(self, key: str, offset: int, length: int) -> ReadHandle | None:
        return self.reads.read_range(key, offset, length)

    def ensure_local(self, key: str, timeout: float | None) -> bool:
        return self.reads.ensure_local(key, timeout)

    def exists_elsewhere(self, key: str) -> bool:
        return self.reads.exists_elsewhere(key)

    def list_keys(self, prefix: str, local: list[str]) -> list[str]:
        found = set(local)
        for member in sorted(self.membership.view.members):
            try:
                found.update(self.call_member(member, {"op": "c.keys", "prefix": prefix})["keys"])
            except StoreError:
                continue  # a member that just died: its keys are lost or already adopted
        return sorted(found)

    def hello_fields(self) -> dict[str, Any]:
        return {"cluster": self.id, "members": sorted(m.address for m in self.membership.view.members.values())}

    # -- writes ------------------------------------------------------------------------------
    def begin_write(self) -> None:
        with self._writes_cond:
            if self.leaving.is_set():
                raise WorkerLeaving(f"worker {self.id} is leaving the cluster; write elsewhere")
            self._writes += 1

    def end_write(self) -> None:
        with self._writes_cond:
            self._writes -= 1
            self._writes_cond.notify_all()

    def announce(self, key: str, if_absent: bool = False) -> bool:
        """Registers the local object under ``key`` with its owner; drops a stale L2 file.
        ``if_absent``: the owner refuses when it has a record of the key (returns False)."""
        with self.w.store.lock:
            obj = self.w.store.objects.get(key)
            if obj is None:
                return not if_absent
            fields = {"key": key, "holder": self.id, "size": obj.size, "meta": obj.meta,
                      "mode": obj.l2_mode or "none", "tier": obj.tier or "l2"}
            gen = obj.gen
        resp = self.meta_call(key, {"op": "c.meta_put", **fields, **({"nx": True} if if_absent else {})})
        if resp.get("exists"):
            return False
        self.copies.register(key, resp["ver"], gen, primary=True)
        if resp.get("prev_l2") and fields["mode"] == "none" and self.w.store.l2 is not None:
            self.w.store.l2.delete(key)
        return True

    def forward_atomic(self, key: str, header: dict[str, Any]) -> dict[str, Any] | None:
        """Sends a read-modify-write op to the key's ring owner (None: this worker owns it,
        or the sender already forwarded it here), retrying while the ring settles."""
        if header.get("fwd"):
            return None
        deadline = time.monotonic() + self.cfg.get_timeout
        while True:
            owner = self.preference(key)[0]
            if owner == self.id:
                return None
            try:
                return self.pool.call(self.address_of(owner), {**header, "fwd": True})
            except (ConnectionLost, WorkerLeaving, PeerUnreachable):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def meta_call(self, key: str, header: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        return self.links.meta_call(key, header, deadline)

    def preference(self, key: str) -> list[str]:
        return self.links.preference(key)

    def call_member(self, member: str, header: dict[str, Any], payload: bytes | None = None) -> dict[str, Any]:
        return self.links.call_member(member, header, payload)

    def address_of(self, member: str) -> str:
        return self.links.address_of(member)

    # -- local copies ------------------------------------------------------------------------
    def keep_local(self, key: str, ver: int, meta: dict[str, Any], size: int, data: Region | bytearray,
                   primary: bool = False) -> None:
        self.copies.keep(key, ver, meta, size, data, primary)

    def invalidate(self, key: str, ver: int) -> None:
        self.copies.invalidate(key, ver)

    # -- status ------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        state = self.membership.view.state
        primaries, replicas = self.copies.census()
        with self.lock:
            counters = {**self.counters, **self.copies.counters}
            nrec = len(self.records)
        return {"id": self.id, "address": self.address, "epoch": state.epoch,
                "ring": {"vnodes": state.ring.vnodes, "members": state.ring.weights,
                         "ownership": state.ring.ownership()},
                "members": {m: i.address for m, i in self.membership.view.members.items()},
                "records": nrec, "primaries": primaries, "replicas": replicas,
                "leaving": self.leaving.is_set(), "counters": counters,
                "last_rebalance_s": self.moves.last_rebalance_s,
                **{k: v for part in self.status_parts for k, v in part().items()},
                "metastore": "builtin (head)" if self.cfg.head else (self.cfg.join and f"builtin at {self.cfg.join}")
                or self.cfg.metastore}
