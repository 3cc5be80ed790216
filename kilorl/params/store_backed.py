"""The parameter store on kiloRL's data system: versions as shards of one flat byte vector.

Version ``v`` of ``name`` is ``num_shards`` versioned store objects ``{name}/shard/{k}`` (the
flat vector cut by ``FlatLayout``) plus a small commit record ``{name}/layout`` (the layout as
JSON) published *last*: a reader that sees version ``v`` of the commit record finds every
shard of ``v`` already there, so a fetch is one consistent version, never a mix of two.

A shard is stored as its tensor parts keyed by flat offset (``shard_pieces``): views of the
tensors' own memory, so a publish copies each byte once, into the worker's arena.

A reader turns its layout into byte ranges per shard (``kilorl.params.resharding``) and reads
those ranges from its own node's worker; on the node the bytes come as zero-copy views of the
worker's shared memory and are copied once, straight into the destination tensors
(``fetch_into``). When a version is reclaimed between reading the commit record and the
shards (a writer far ahead), the fetch retries on the newest version.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from kilorl.params.layout import FlatLayout, Full, LayoutError, ReaderLayout
from kilorl.params.reconnect import ParametersLost, publish_once, with_reconnect
from kilorl.params.resharding import ReadPlan, plan_read

ClientFactory = Callable[[], Any]
"""Returns a connected ``kilorl.store.StoreClient`` (one per thread: clients are not shared)."""


def layout_key(name: str) -> str:
    return f"{name}/layout"


def shard_key(name: str, shard: int) -> str:
    return f"{name}/shard/{shard}"


class StoreParameterStore:
    """``publish / latest_version / fetch / wait`` over store workers (the ParameterStore contract).

    ``connect`` makes a client to this process's node worker; ``num_shards`` is how many
    pieces a publish cuts the parameters into (``parallelism.parameter_server``); the ring
    spreads the shard keys over the workers.
    """

    def __init__(self, connect: ClientFactory, num_shards: int = 1, write_mode: Any = None, retries: int = 3,
                 replicas: Sequence[ClientFactory] = ()) -> None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        self._connect = connect
        self.num_shards = num_shards
        self.write_mode = write_mode
        self.retries = retries
        self.replicas = list(replicas)
        """Further workers a publish also writes to (the other nodes' workers), so every
        node's readers find each version on their own node."""
        self._local = threading.local()
        self._layouts: dict[tuple[str, int], FlatLayout] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (roles receive it through Ray): connections are per process and thread."""
        state = dict(self.__dict__)
        state.pop("_local")
        state["_layouts"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    @property
    def client(self) -> Any:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = self._connect()
        return c

    def _writers(self) -> list[Any]:
        ws = getattr(self._local, "writers", None)
        if ws is None:
            own = self.client
            others = [make for make in self.replicas if getattr(make, "address", None) != own.address]
            ws = self._local.writers = [own, *(make() for make in others)]
        return ws

    def close(self) -> None:
        """Close this thread's connections (others close with their threads' process)."""
        for c in getattr(self._local, "writers", None) or [getattr(self._local, "client", None)]:
            if c is not None:
                try:
                    c.close()
                except OSError:
                    pass
        self._local = threading.local()

    def _retry(self, fn: Callable[[], Any]) -> Any:
        return with_reconnect(fn, self.close)

    # -- writer ----------------------------------------------------------------------
    def publish(self, name: str, version: int, tensors: Mapping[str, Any]) -> None:
        """Every shard of ``version`` on every writer worker, then the commit records."""
        tensors = {k: torch.as_tensor(v) for k, v in tensors.items()}  # numpy arrays: no copy
        layout = FlatLayout.of(tensors, self.num_shards)
        kw = {} if self.write_mode is None else {"write_mode": self.write_mode}
        shards = shard_pieces(tensors, layout)
        record = json.dumps(layout.to_json()).encode()

        def once() -> None:
            writers = self._writers()
            for c in writers:
                for k, shard in enumerate(shards):
                    publish_once(c, shard_key(name, k), version, shard, kw)
            for c in writers:
                publish_once(c, layout_key(name), version, record, kw)

        self._retry(once)

    # -- readers ---------------------------------------------------------------------
    def latest_version(self, name: str) -> int | None:
        return self._retry(lambda: self.client.latest_version(layout_key(name)))

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        """Block until ``min_version``; ``ParametersLost`` if the worker came back without ``name``."""
        try:
            return self.client.wait_version(layout_key(name), min_version, timeout)
        except ConnectionError:
            if self.latest_version(name) is None:  # reconnects; a restarted, non-durable worker
                raise ParametersLost(f"{name}: the store worker restarted without the parameters") from None
            return self._retry(lambda: self.client.wait_version(layout_key(name), min_version, timeout))

    def layout(self, name: str, version: int | None = None) -> tuple[int, FlatLayout]:
        """The writer's layout of ``version`` (the newest when None)."""
        if version is not None and (name, version) in self._layouts:
            return version, self._layouts[(name, version)]
        got = self.client.get_version(layout_key(name), version)
        layout = FlatLayout.from_json(json.loads(bytes(got.value)))
        self._layouts = {k: v for k, v in self._layouts.items() if k[0] != name}  # keep one per name
        self._layouts[(name, got.version)] = layout
        return got.version, layout

    def fetch(self, name: str, version: int | None = None,
              layout: ReaderLayout | Sequence[str] | None = None) -> tuple[int, dict[str, torch.Tensor]]:
        """``(version, tensors)``: the whole version, the named tensors, or a reader layout's slices."""
        return self._retry(lambda: self._read(name, version, layout, None))

    def fetch_into(self, name: str, out: Mapping[str, torch.Tensor], version: int | None = None,
                   layout: ReaderLayout | None = None) -> int:
        """Copy a version straight into ``out`` (e.g. ``dict(model.named_parameters())``); returns the version."""
        return self._read(name, version, layout if layout is not None else {k: Full() for k in out}, out)[0]

    def _read(self, name: str, version: int | None, layout: Any, out: Mapping[str, torch.Tensor] | None):
        from kilorl.store import VersionGone

        for attempt in range(self.retries + 1):
            try:
                v, writer = self.layout(name, version)
                plan = plan_read(writer, _reader_layout(layout))
                segments = self._segments(name, v, writer, plan)
            except VersionGone:
                if self.client.latest_version(layout_key(name)) is None:
                    # the worker restarted empty between our wait and this read: someone must republish
                    raise ParametersLost(f"{name}: the store worker restarted without the parameters") from None
                if version is not None or attempt == self.retries:
                    raise
                time.sleep(0)  # a newer version replaced it: read that one
                continue
            with torch.no_grad():
                tensors = plan.assemble_segments(segments, out)
            return v, tensors
        raise AssertionError("unreachable")

    def _segments(self, name: str, version: int, writer: FlatLayout, plan: ReadPlan) -> list[tuple[int, Any]]:
        """``(flat_offset, bytes)`` pieces of every shard the plan touches (zero-copy views on the node).

        Whole shards are read: on the node they are views of shared memory, so only the bytes
        the plan needs are ever copied (into the destination tensors).
        """
        out: list[tuple[int, Any]] = []
        for shard in sorted({r.shard for r in plan.requests}):
            value = self.client.get_version(shard_key(name, shard), version).value
            if isinstance(value, Mapping):  # pieces keyed by their flat offset (``shard_pieces``)
                out += [(int(k), v) for k, v in value.items()]
            else:
                out.append((writer.bounds[shard], value))
        return out


def shard_pieces(tensors: Mapping[str, torch.Tensor], layout: FlatLayout) -> list[dict[str, memoryview]]:
    """Each writer shard as ``{str(flat_offset): bytes of the tensor part there}``: views of the
    tensors' own memory, so a publish copies each byte once (into the store's arena)."""
    parts: list[dict[str, memoryview]] = [{} for _ in range(layout.num_shards)]
    bounds = layout.bounds
    for spec in layout.tensors:
        t = tensors[spec.name].detach().to("cpu").contiguous()
        if tuple(t.shape) != spec.shape or str(t.dtype).removeprefix("torch.") != spec.dtype:
            raise LayoutError(f"{spec.name}: tensor is {t.dtype} {list(t.shape)}, layout says {spec.dtype} {list(spec.shape)}")
        if not spec.nbytes:
            continue
        raw = memoryview(t.reshape(-1).view(torch.uint8).numpy())
        start, end = spec.offset, spec.offset + spec.nbytes
        k = bisect.bisect_right(bounds, start) - 1
        while start < end:
            stop = min(end, bounds[k + 1])
            if stop > start:
                parts[k][str(start)] = raw[start - spec.offset:stop - spec.offset]
            start = stop
            k += 1
    return parts


def _reader_layout(layout: ReaderLayout | Sequence[str] | None) -> ReaderLayout | None:
    if layout is None or isinstance(layout, Mapping):
        return layout
    return {k: Full() for k in layout}
