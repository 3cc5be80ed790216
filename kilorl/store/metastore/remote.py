"""A ``Metastore`` served by the head worker of a built-in cluster (``--join HOST:PORT``).

Every call is one request frame on a pooled connection to the head (``mesh/metastore_service.py``);
watches are long polls on their own connection. When the head cannot be reached the
calls raise ``MetastoreUnavailable``, as an unreachable etcd would.
"""

from __future__ import annotations

import threading
from typing import Any

from kilorl.store.errors import ConnectionLost, StoreError
from kilorl.store.metastore import wire
from kilorl.store.metastore.base import (
    CasResult,
    KeyValue,
    Lease,
    Metastore,
    MetastoreClosed,
    MetastoreUnavailable,
    RangeResult,
    Watch,
    check_key,
    check_ttl,
    check_value,
)
from kilorl.store.wire.peers import PeerConn, PeerPool


class RemoteMetastore(Metastore):
    """Client of a ``MetastoreService`` hosted by the worker at ``address``."""

    def __init__(self, address: str, token: str | None, timeout: float = 10.0):
        self.address = address
        self.token = token
        self.timeout = timeout
        self._pool = PeerPool(token, timeout)
        self._closed = False
        self._watches: list[_RemoteWatch] = []
        self._lock = threading.Lock()

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise MetastoreClosed("metastore is closed")
        try:
            resp = self._pool.call(self.address, {"op": op, **fields})
        except ConnectionLost as exc:
            raise MetastoreUnavailable(f"head worker {self.address} unreachable: {exc}") from None
        except StoreError as exc:
            raise MetastoreUnavailable(f"head worker {self.address} refused {op}: {exc}") from None
        if "merr" in resp:
            raise wire.ERRORS.get(resp["merr"], wire.ERRORS["metastore"])(resp.get("msg", ""))
        return resp

    def get(self, key: bytes) -> KeyValue | None:
        return wire.kv_in(self._call("meta.get", key=check_key(key))["kv"])

    def range(self, prefix: bytes) -> RangeResult:
        resp = self._call("meta.range", prefix=bytes(prefix))
        return RangeResult([wire.kv_in(kv) for kv in resp["kvs"]], resp["rev"])

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        return self._call("meta.put", key=check_key(key), value=check_value(value), lease=lease)["rev"]

    def delete(self, key: bytes) -> bool:
        return self._call("meta.delete", key=check_key(key))["found"]

    def delete_prefix(self, prefix: bytes) -> int:
        return self._call("meta.delete_prefix", prefix=bytes(prefix))["n"]

    def compare_and_swap(self, key: bytes, expected_mod_revision: int, value: bytes, lease: int = 0) -> CasResult:
        return wire.cas_in(self._call("meta.cas", key=check_key(key), expect=expected_mod_revision,
                                      value=check_value(value), lease=lease))

    def compare_and_delete(self, key: bytes, expected_mod_revision: int) -> CasResult:
        return wire.cas_in(self._call("meta.cad", key=check_key(key), expect=expected_mod_revision))

    def grant_lease(self, ttl: float) -> Lease:
        resp = self._call("meta.grant", ttl=check_ttl(ttl))
        return Lease(resp["id"], resp["ttl"])

    def keepalive(self, lease_id: int) -> int:
        return self._call("meta.keepalive", lease=lease_id)["ttl"]

    def revoke(self, lease_id: int) -> None:
        self._call("meta.revoke", lease=lease_id)

    def lease_time_to_live(self, lease_id: int) -> int:
        return self._call("meta.ttl", lease=lease_id)["ttl"]

    def revision(self) -> int:
        return self._call("meta.revision")["rev"]

    def watch(self, prefix: bytes, start_revision: int = 0) -> Watch:
        wid = self._call("meta.watch", prefix=bytes(prefix), start=start_revision)["id"]
        try:
            conn = PeerConn(self.address, self.token, timeout=self.timeout + 10)
        except ConnectionLost as exc:
            raise MetastoreUnavailable(str(exc)) from None
        watch = _RemoteWatch(bytes(prefix), wid, conn)
        with self._lock:
            self._watches = [w for w in self._watches if not w.closed] + [watch]
        return watch

    def close(self) -> None:
        self._closed = True
        with self._lock:
            watches, self._watches = self._watches, []
        for w in watches:
            w.close()
        self._pool.close()


class _RemoteWatch(Watch):
    def __init__(self, prefix: bytes, wid: int, conn: PeerConn):
        super().__init__(prefix)
        self._wid = wid
        self._conn = conn
        self._thread = threading.Thread(target=self._run, name=f"remote-watch-{wid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.closed:
            try:
                resp, _ = self._conn.call({"op": "meta.poll", "id": self._wid, "timeout": 0.5})
            except StoreError as exc:
                if not self.closed:
                    self.fail(MetastoreUnavailable(f"watch stream from head lost: {exc}"))
                return
            if "merr" in resp:
                self.fail(wire.ERRORS.get(resp["merr"], wire.ERRORS["metastore"])(resp.get("msg", "")))
                return
            self.push([wire.event_in(e) for e in resp["events"]])

    def _cancel(self) -> None:
        try:
            self._conn.fs.sock.shutdown(2)
        except OSError:
            pass
        self._conn.close()
