"""Metastore values on the store wire: plain msgpack-able dicts, never pickle.

Shared by the head worker's ``MetastoreService`` and the joiners' ``RemoteMetastore``.
"""

from __future__ import annotations

from typing import Any

from kilorl.store.metastore.base import (
    CasResult,
    CompactedError,
    KeyValue,
    LeaseNotFound,
    MetastoreClosed,
    MetastoreError,
    WatchClosed,
    WatchEvent,
)

ERRORS: dict[str, type[MetastoreError]] = {
    "lease_not_found": LeaseNotFound,
    "compacted": CompactedError,
    "closed": MetastoreClosed,
    "watch_closed": WatchClosed,
    "metastore": MetastoreError,
}


def error_name(exc: MetastoreError) -> str:
    for name, cls in ERRORS.items():
        if type(exc) is cls:
            return name
    return "metastore"


def kv_out(kv: KeyValue | None) -> dict[str, Any] | None:
    if kv is None:
        return None
    return {"k": kv.key, "v": kv.value, "c": kv.create_revision, "m": kv.mod_revision, "n": kv.version, "l": kv.lease}


def kv_in(raw: dict[str, Any] | None) -> KeyValue | None:
    if raw is None:
        return None
    return KeyValue(bytes(raw["k"]), bytes(raw["v"]), int(raw["c"]), int(raw["m"]), int(raw["n"]), int(raw["l"]))


def cas_out(result: CasResult) -> dict[str, Any]:
    return {"swapped": result.succeeded, "rev": result.revision, "cur": kv_out(result.current)}


def cas_in(raw: dict[str, Any]) -> CasResult:
    return CasResult(bool(raw["swapped"]), int(raw["rev"]), kv_in(raw["cur"]))


def event_out(event: WatchEvent) -> dict[str, Any]:
    return {"t": event.type, "kv": kv_out(event.kv)}


def event_in(raw: dict[str, Any]) -> WatchEvent:
    return WatchEvent(raw["t"], kv_in(raw["kv"]))
