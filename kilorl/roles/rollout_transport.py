"""How a rollout travels actor -> learner: Ray's object store, or the run's store workers.

``store.transport: ray`` returns the ``Rollout`` itself from ``collect``; Ray moves it.
``store.transport: store`` writes the rollout's arrays as one store object (a dict of
numpy arrays) on the actor's node worker and returns a small ``RolloutHandle``; the
learner reads it (zero-copy on the same node, pulled once through the mesh from another
node), rebuilds the ``Rollout`` and deletes the key after its update. A TTL on every key
is the safety net for a rollout whose learner never came (docs/architecture.md,
"Distributed engine").
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilorl.algos import keys
from kilorl.core import Rollout

ROLLOUT_PREFIX = "rollout/"
"""Every rollout key starts with this (tests and operators list them by it)."""
ROLLOUT_TTL_S = 900.0
"""Seconds a rollout key lives if no learner deletes it (an actor or learner died)."""

_STEPS, _LAST, _MOMENTS, _META = "steps/", "last/", "moments/", "meta/"
_FINAL, _STATE = "final/", "state/"


@dataclass(frozen=True)
class RolloutHandle:
    """What the driver passes to a learner instead of a rollout's arrays."""

    key: str
    version: int | None
    produced_at: float
    """``time.time()`` when the actor finished the rollout (hand-off latency is measured from it)."""
    nbytes: int


def pack(rollout: Rollout) -> dict[str, np.ndarray]:
    """One flat name -> array dict: ``steps/*``, ``last/*``, ``final/*``, ``state/*``,
    ``moments/<name>/<i>/{mean,var,count}``, ``meta/*``."""
    out: dict[str, np.ndarray] = {_STEPS + k: np.ascontiguousarray(v) for k, v in rollout.steps.items()}
    for prefix, part in ((_LAST, rollout.last), (_FINAL, rollout.final), (_STATE, rollout.state)):
        out.update({prefix + k: np.ascontiguousarray(v) for k, v in part.items()})
    for name, parts in rollout.moments.items():
        out[f"{_MOMENTS}{name}/n"] = np.asarray(len(parts), np.int64)
        for i, m in enumerate(parts):
            base = f"{_MOMENTS}{name}/{i}/"
            out[base + "mean"] = np.asarray(m.mean)
            out[base + "var"] = np.asarray(m.var)
            out[base + "count"] = np.asarray(m.count, np.float64)
    out[_META + "version"] = np.asarray(-1 if rollout.version is None else rollout.version, np.int64)
    out[_META + "env_steps_before"] = np.asarray(rollout.env_steps_before, np.int64)
    if rollout.column_versions is not None:
        out[_META + "column_versions"] = np.ascontiguousarray(rollout.column_versions, np.int64)
    return out


def unpack(arrays: dict[str, Any]) -> Rollout:
    """The ``Rollout`` that ``pack`` flattened (arrays may be read-only zero-copy views)."""
    from kilorl.envs.normalization import Moments

    def part(prefix: str) -> dict[str, np.ndarray]:
        return {k.removeprefix(prefix): np.asarray(v) for k, v in arrays.items() if k.startswith(prefix)}

    steps, last = part(_STEPS), part(_LAST)
    final = part(_FINAL)
    for k in (keys.FINAL_T, keys.FINAL_ENV):  # index arrays come back 1-d even when empty
        if k in final:
            final[k] = final[k].reshape(-1)
    moments: dict[str, list[Moments]] = {}
    for key in arrays:
        if key.startswith(_MOMENTS) and key.endswith("/n"):
            name = key[len(_MOMENTS):-2]
            base = f"{_MOMENTS}{name}/"
            moments[name] = [Moments(np.asarray(arrays[f"{base}{i}/mean"]), np.asarray(arrays[f"{base}{i}/var"]),
                                     float(_scalar(arrays[f"{base}{i}/count"])))
                             for i in range(int(_scalar(arrays[key])))]
    version = int(_scalar(arrays[_META + "version"]))
    before = int(_scalar(arrays[_META + "env_steps_before"])) if _META + "env_steps_before" in arrays else 0
    columns = arrays.get(_META + "column_versions")
    return Rollout(steps=steps, last=last, moments=moments, version=None if version < 0 else version,
                   final=final, state=part(_STATE), env_steps_before=before,
                   column_versions=None if columns is None else np.asarray(columns, np.int64).reshape(-1))


def _scalar(value: Any) -> Any:
    """A stored 0-d array's value (the store may hand it back with shape ``(1,)``)."""
    return np.asarray(value).reshape(-1)[0]


class StoreRolloutWriter:
    """The actor side: one store object per rollout, on the worker ``client`` reaches."""

    def __init__(self, client: Any, actor: int, ttl: float = ROLLOUT_TTL_S) -> None:
        self.client, self.ttl = client, ttl
        self.prefix = f"{ROLLOUT_PREFIX}{uuid.uuid4().hex[:12]}/{actor}/"
        """Unique per actor process: a restarted actor never reuses a key."""
        self.sequence = 0

    def put(self, rollout: Rollout) -> RolloutHandle:
        produced_at = time.time()
        arrays = pack(rollout)
        key = f"{self.prefix}{self.sequence}"
        self.sequence += 1
        self.client.set(key, arrays, ttl=self.ttl)
        return RolloutHandle(key, rollout.version, produced_at, sum(a.nbytes for a in arrays.values()))


class StoreRolloutReader:
    """The learner side: reads handles into rollouts, deletes their keys once trained on."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.handoff_s: list[float] = []
        """Per rollout read since the last ``take_stats``: produced -> arrays here (seconds)."""

    def get(self, handle: RolloutHandle) -> Rollout:
        rollout = unpack(self.client.get(handle.key))
        self.handoff_s.append(time.time() - handle.produced_at)
        return rollout

    def release(self, handles: list[RolloutHandle]) -> None:
        """Delete the rollouts' keys (each rollout has exactly one reading learner)."""
        if handles:
            self.client.delete(*[h.key for h in handles])

    def take_stats(self) -> dict[str, float]:
        if not self.handoff_s:
            return {}
        out = {"rollout_handoff_s": max(self.handoff_s)}
        self.handoff_s = []
        return out


def store_client_of(parameter_store: Any, field: str = "store.transport") -> Any:
    """The node-local store client of a role's parameter store (the rollout goes to the same worker)."""
    client = getattr(parameter_store, "client", None)
    if client is None or not hasattr(client, "set"):
        raise ValueError(f"{field}=store needs parameters on store workers; the parameter store "
                         f"{type(parameter_store).__name__} has no store client (use {field}=ray)")
    return client
