"""Test doubles of the ParameterStore contract: in-process, and sharded over Ray actors.

Training runs on ``kilorl.params.store_backed.StoreParameterStore`` (store workers, see
``kilorl.trainer.session.parameter_store``). These two keep the contract
(docs/architecture.md, "Contracts") with the least machinery, for unit tests of roles:
versions are monotonic, a fetch returns one complete version, ``wait`` blocks without polling.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from kilorl.core import ParameterStore, Tensors


class _Versions:
    """Newest ``keep`` versions of each name. Not thread-safe: callers lock."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data: dict[str, OrderedDict[int, dict[str, Any]]] = {}

    def put(self, name: str, version: int, tensors: Tensors) -> None:
        versions = self.data.setdefault(name, OrderedDict())
        if versions and version <= next(reversed(versions)):
            raise ValueError(f"{name}: version {version} is not newer than {next(reversed(versions))}")
        # A version never changes once published: a publisher's arrays may be views of its live
        # parameters, and a reader may keep (share) what it fetched.
        versions[version] = {k: v.clone() if hasattr(v, "clone") else np.array(v, copy=True) for k, v in tensors.items()}
        while len(versions) > self.keep:
            versions.popitem(last=False)

    def latest(self, name: str) -> int | None:
        versions = self.data.get(name)
        return next(reversed(versions)) if versions else None

    def get(self, name: str, version: int | None, layout: list[str] | None) -> tuple[int, dict[str, Any]]:
        versions = self.data.get(name)
        if not versions:
            raise KeyError(f"{name}: nothing published")
        v = next(reversed(versions)) if version is None else version
        if v not in versions:
            raise KeyError(f"{name}: version {v} not held (held: {list(versions)})")
        tensors = versions[v]
        if layout is not None:
            missing = [k for k in layout if k not in tensors]
            if missing:
                raise KeyError(f"{name}@{v}: no tensors {missing}")
            tensors = {k: tensors[k] for k in layout}
        return v, tensors


class InMemoryParameterStore(ParameterStore):
    """Thread-safe store for one process (tests, evaluation, single-process runs)."""

    def __init__(self, keep: int = 4) -> None:
        self._versions = _Versions(keep)
        self._cond = threading.Condition()

    def publish(self, name: str, version: int, tensors: Tensors) -> None:
        with self._cond:
            self._versions.put(name, version, tensors)
            self._cond.notify_all()

    def latest_version(self, name: str) -> int | None:
        with self._cond:
            return self._versions.latest(name)

    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None,
              share: bool = False) -> tuple[int, Tensors]:
        with self._cond:
            return self._versions.get(name, version, layout)

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                v = self._versions.latest(name)
                if v is not None and v >= min_version:
                    return v
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{name}: no version >= {min_version} within {timeout}s (latest {v})")
                self._cond.wait(remaining)


class ParameterShard:
    """One parameter-server shard: an async Ray actor holding some tensors of each version."""

    def __init__(self, keep: int = 4) -> None:
        self._versions = _Versions(keep)
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    async def publish(self, name: str, version: int, tensors: dict[str, Any]) -> None:
        cond = self._condition()
        async with cond:
            self._versions.put(name, version, tensors)
            cond.notify_all()

    async def latest_version(self, name: str) -> int | None:
        return self._versions.latest(name)

    async def fetch(self, name: str, version: int, layout: list[str] | None) -> dict[str, Any]:
        return self._versions.get(name, version, layout)[1]

    async def wait(self, name: str, min_version: int, timeout: float | None) -> int:
        cond = self._condition()
        async with cond:
            ok = lambda: (v := self._versions.latest(name)) is not None and v >= min_version  # noqa: E731
            if ok():  # there already: asyncio.wait_for with a zero timeout would time out regardless
                return self._versions.latest(name)  # type: ignore[return-value]
            try:
                await asyncio.wait_for(cond.wait_for(ok), timeout)
            except TimeoutError:
                raise TimeoutError(f"{name}: no version >= {min_version} within {timeout}s") from None
            return self._versions.latest(name)  # type: ignore[return-value]


def shard_of(tensor_name: str, num_shards: int) -> int:
    """Stable tensor -> shard assignment (crc32, identical in every process)."""
    return zlib.crc32(tensor_name.encode()) % num_shards


class RayParameterStore(ParameterStore):
    """Tensors of each version are split across ``parameter_server`` shard actors.

    A version counts as published once every shard holds its part, so ``latest_version``
    is the minimum over shards and a fetch of that version is always complete. Readers
    ask only the shards that hold the tensors in their ``layout``, all in parallel.
    The object is picklable (it holds actor handles) and is passed to every role.
    """

    def __init__(self, shards: list[Any]) -> None:
        if not shards:
            raise ValueError("RayParameterStore needs at least one shard")
        self.shards = shards

    @classmethod
    def create(cls, num_shards: int, keep: int = 4, name_prefix: str | None = None) -> RayParameterStore:
        import ray

        remote = ray.remote(num_cpus=0, max_concurrency=64)(ParameterShard)
        shards = []
        for i in range(num_shards):
            opts = {"name": f"{name_prefix}-ps{i}"} if name_prefix else {}
            shards.append(remote.options(**opts).remote(keep))
        return cls(shards)

    def publish(self, name: str, version: int, tensors: Tensors) -> None:
        import ray

        parts: list[dict[str, Any]] = [{} for _ in self.shards]
        for k, v in tensors.items():
            parts[shard_of(k, len(self.shards))][k] = v
        ray.get([s.publish.remote(name, version, p) for s, p in zip(self.shards, parts)])

    def latest_version(self, name: str) -> int | None:
        import ray

        versions = ray.get([s.latest_version.remote(name) for s in self.shards])
        return None if any(v is None for v in versions) else min(versions)

    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None,
              share: bool = False) -> tuple[int, Tensors]:
        import ray

        if version is None:
            version = self.latest_version(name)
            if version is None:
                raise KeyError(f"{name}: nothing published")
        wanted: dict[int, list[str] | None]
        if layout is None:
            wanted = {i: None for i in range(len(self.shards))}
        else:
            wanted = {}
            for k in layout:
                wanted.setdefault(shard_of(k, len(self.shards)), []).append(k)  # type: ignore[union-attr]
        parts = ray.get([self.shards[i].fetch.remote(name, version, keys) for i, keys in wanted.items()])
        out: dict[str, Any] = {}
        for p in parts:
            out.update(p)
        return version, out

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        import ray

        versions = ray.get([s.wait.remote(name, min_version, timeout) for s in self.shards])
        return min(versions)
