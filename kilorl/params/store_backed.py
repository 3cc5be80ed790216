"""The parameter store on kiloRL's data system: versions as shards of one flat byte vector.

Version ``v`` of ``name`` is ``num_shards`` versioned store objects ``{name}/shard/{k}`` (raw
bytes of the flat vector cut by ``FlatLayout``) plus a small commit record ``{name}/layout``
(the layout as JSON) published *last*, in one pipelined batch that stops at its first
failure: a reader that sees version ``v`` of the commit record finds every shard of ``v``
already there, so a fetch is one consistent version, never a mix of two.

A shard is handed to the store as the tensor parts it holds (``PublishPlan``, worked out
once per set of shapes): views of the tensors' own memory, stored end to end, so a publish
copies each byte once, into the worker's arena, and a shard's byte ``i`` is flat byte
``bounds[k] + i``.

A reader turns its layout into byte ranges per shard (``kilorl.params.resharding``) and reads
exactly those ranges, with the commit record, in one request to its own node's worker
(``kilorl.params.store_reads``); on the node the bytes come as zero-copy views of the
worker's shared memory and are copied once, straight into the destination tensors
(``fetch_into``). ``wait`` reads the version it waited for in the same request, so a wait
and the fetch after it cost one round trip. A reader that copies every version into the
same tensors needs no bytes from its ``wait``: it waits for the version number on the
worker's version board, and ``fetch_into`` copies from the arena into its tensors by the
byte runs of its last copy (``CopyIn.on_board``), with no buffer in between: warm, a wait
and a copy of a 5-tensor policy cost 27 us against 42 us through a buffer on the 2-core VM.
When a version is reclaimed under a reader (a writer far ahead), the fetch retries on the
newest version.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kilorl.params.copy_in import CopyIn
from kilorl.params.layout import FlatLayout, ReaderLayout
from kilorl.params.publish_plan import PublishPlan, shard_chunks
from kilorl.params.reconnect import RECONNECT_TIMEOUT_S, ParametersLost, publish_once, with_reconnect
from kilorl.params.store_reads import (
    CachedPlan,
    Prefetched,
    VersionReads,
    assemble,
    layout_key,
    plan_key,
    reader_layout,
    shard_key,
)
from kilorl.store.errors import BatchAborted, InvalidRequest, ObjectLost, VersionGone, WorkerUnreachable

if TYPE_CHECKING:
    import torch

ClientFactory = Callable[[], Any]
"""Returns a connected ``kilorl.store.StoreClient`` (one per thread: clients are not shared)."""

__all__ = ["ClientFactory", "PublishPlan", "StoreParameterStore", "layout_key", "shard_chunks", "shard_key"]


class StoreParameterStore:
    """``publish / latest_version / fetch / wait`` over store workers (the ParameterStore contract).

    ``connect`` makes a client to this process's node worker; ``num_shards`` is how many
    pieces a publish cuts the parameters into (``parallelism.parameter_server``); the ring
    spreads the shard keys over the workers. ``reconnect_timeout_s`` (``store.reconnect_timeout_s``)
    is how long an operation rides out a lost worker (``kilorl.params.reconnect``).
    """

    def __init__(self, connect: ClientFactory, num_shards: int = 1, write_mode: Any = None, retries: int = 3,
                 replicas: Sequence[ClientFactory] = (), max_gap: int = 0,
                 reconnect_timeout_s: float = RECONNECT_TIMEOUT_S,
                 shard_homes: Sequence[ClientFactory] = ()) -> None:
        if not reconnect_timeout_s > 0:
            raise ValueError(f"reconnect_timeout_s must be > 0, got {reconnect_timeout_s}")
        self.reconnect_timeout_s = reconnect_timeout_s
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        if max_gap < 0:
            raise ValueError(f"max_gap must be >= 0, got {max_gap}")
        if shard_homes and len(shard_homes) != num_shards:
            raise ValueError(f"shard_homes names {len(shard_homes)} workers for {num_shards} shards")
        if shard_homes and replicas:
            raise ValueError("shard_homes and replicas exclude each other: replicas take every shard")
        self._connect = connect
        self.connect = connect
        """The client factory (this process's node worker), for other users of the same workers."""
        self.num_shards = num_shards
        self.write_mode = write_mode
        self.retries = retries
        self.max_gap = max_gap
        """Bytes a reader may read in excess to join two ranges (0: exactly the bytes needed)."""
        self.replicas = list(replicas)
        """Further workers a publish also writes to (the other nodes' workers), so every
        node's readers find each version on their own node."""
        self.shard_homes = list(shard_homes)
        """Per shard, the factory of the worker that holds it (empty: the publisher's own)."""
        self._local = threading.local()
        self._plans: dict[tuple[str, tuple], CachedPlan] = {}
        self._publish_plans: dict[tuple, PublishPlan] = {}
        self._last_publish: tuple[FlatLayout, Sequence[int], Sequence[float]] | None = None
        """What ``publish_stats`` reports: the layout, each shard's writer, each writer's seconds."""

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (roles receive it through Ray): connections are per process and thread."""
        state = dict(self.__dict__)
        state.pop("_local")
        state["_plans"] = {}
        state["_publish_plans"] = {}
        state["_last_publish"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    @property
    def client(self) -> Any:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = self._configured(self._connect())
        return c

    def _configured(self, client: Any) -> Any:
        """A client that reconnects until our deadline and then lets us repeat the operation
        (``Reconnected``): a wait must not be repeated on a worker that came back empty."""
        if hasattr(client, "replay"):
            client.replay = False
            client.reconnect_timeout = self.reconnect_timeout_s
            # shards live on several nodes' workers: a node's worker pulls each one once for all its readers
            client.pull_whole = bool(self.shard_homes)
        return client

    def _reads(self) -> VersionReads:
        r = getattr(self._local, "reads", None)
        if r is None or r.client is not self.client:
            r = self._local.reads = VersionReads(self.client, self._plans, self.max_gap)
        return r

    def _writers(self) -> list[Any]:
        ws = getattr(self._local, "writers", None)
        if ws is None:
            own = self.client
            others = [make for make in self.replicas if getattr(make, "address", None) != own.address]
            ws = self._local.writers = [own, *(self._configured(make()) for make in others)]
        return ws

    def _shard_writers(self) -> list[Any]:
        """Per shard, the client of the worker that holds it: this thread's, one per worker,
        the own client where a home is this process's own worker."""
        ws = getattr(self._local, "shard_writers", None)
        if ws is None:
            own = self.client
            by_address: dict[str, Any] = {own.address: own}
            ws = []
            for make in self.shard_homes:
                c = self._configured(make())
                if c.address in by_address:
                    c.close()
                else:
                    by_address[c.address] = c
                ws.append(by_address[c.address])
            self._local.shard_writers = ws
        return ws

    def close(self) -> None:
        """Close this thread's connections (others close with their threads' process)."""
        homes = {id(c): c for c in getattr(self._local, "shard_writers", None) or ()}
        for c in homes.values():
            if c is not getattr(self._local, "client", None):
                try:
                    c.close()
                except OSError:
                    pass
        for c in getattr(self._local, "writers", None) or [getattr(self._local, "client", None)]:
            if c is not None:
                try:
                    c.close()
                except OSError:
                    pass
        self._local = threading.local()

    def _retry(self, fn: Callable[[], Any]) -> Any:
        """``fn`` through reconnects; a version whose bytes died with the only worker holding them
        (``ObjectLost``, not durable) is ``ParametersLost``: the writer must republish, as for a
        worker that came back empty."""
        try:
            return with_reconnect(fn, self.close, self.reconnect_timeout_s)
        except ObjectLost as e:
            raise ParametersLost(f"parameters lost with a store worker: {e}") from e

    # -- writer ----------------------------------------------------------------------
    def publish(self, name: str, version: int, tensors: Mapping[str, Any]) -> None:
        """Every shard of ``version``, then the commit record, on every writer worker (with
        ``shard_homes``: shard ``k`` on its home worker, the record on this one, last).

        One pipelined batch per worker; a batch refused part way (a retry that finds some
        parts already there) is completed part by part, treating parts already there as done."""
        import torch

        tensors = {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for k, v in tensors.items()}
        plan_id = PublishPlan.key(tensors, self.num_shards)
        plan = self._publish_plans.get(plan_id)
        if plan is None:
            if len(self._publish_plans) >= 64:
                self._publish_plans.clear()
            plan = self._publish_plans[plan_id] = PublishPlan(FlatLayout.of(tensors, self.num_shards))
        kw = {} if self.write_mode is None else {"write_mode": self.write_mode}
        items = [(shard_key(name, k), chunks, version) for k, chunks in enumerate(plan.chunks(tensors))]
        record = (layout_key(name), plan.record, version)
        if self.shard_homes:
            self._retry(lambda: self._publish_to_homes(items, record, plan.layout, kw))
            return
        items.append(record)

        def once() -> None:
            t0 = time.perf_counter()
            for c in self._writers():
                _publish_batch(c, items, kw)
            self._last_publish = (plan.layout, (), (time.perf_counter() - t0,))

        self._retry(once)

    def _publish_to_homes(self, items: list[tuple[str, Any, int]], record: tuple[str, Any, int],
                          layout: FlatLayout, kw: dict[str, Any]) -> None:
        """Each home worker's shards in one batch, then this worker's with the commit record
        last: a reader that sees the record finds every shard, wherever it lives."""
        writers = self._shard_writers()
        own = self.client
        order: list[Any] = []  # distinct writers, this process's own last
        for c in writers:
            if c is not own and c not in order:
                order.append(c)
        order.append(own)
        seconds: list[float] = []
        for c in order:
            batch = [item for item, w in zip(items, writers) if w is c] + ([record] if c is own else [])
            t0 = time.perf_counter()
            _publish_batch(c, batch, kw)
            seconds.append(time.perf_counter() - t0)
        self._last_publish = (layout, [order.index(w) for w in writers], seconds)

    def publish_stats(self) -> dict[str, float]:
        """The last publish of this process, per shard: ``ps_shard<k>_bytes`` and
        ``ps_shard<k>_publish_s`` (the seconds of the request batch that wrote it, its
        worker's), for the learner's metric row. Worked out here, off the publish path."""
        if self._last_publish is None:
            return {}
        layout, writer_of, seconds = self._last_publish
        stats: dict[str, float] = {}
        for k in range(layout.num_shards):
            stats[f"ps_shard{k}_bytes"] = float(layout.bounds[k + 1] - layout.bounds[k])
            stats[f"ps_shard{k}_publish_s"] = seconds[writer_of[k]] if writer_of else seconds[0]
        return stats

    # -- readers ---------------------------------------------------------------------
    def latest_version(self, name: str) -> int | None:
        return self._retry(lambda: self.client.latest_version(layout_key(name)))

    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        """Block until ``min_version``; ``ParametersLost`` if the worker came back without ``name``.

        On the node (zero-copy reads) the wait brings the version's bytes for the reader
        layout this thread fetched ``name`` with last, so the ``fetch`` that follows (of that
        layout, that version or None) is served from them without another request."""
        try:
            return self._wait_once(name, min_version, timeout)
        except WorkerUnreachable:
            raise  # the client already waited out store.reconnect_timeout_s
        except ConnectionError:
            if self.latest_version(name) is None:  # reconnects; a restarted, non-durable worker
                raise ParametersLost(f"{name}: the store worker restarted without the parameters") from None
            return self._retry(lambda: self._wait_once(name, min_version, timeout))

    def _wait_once(self, name: str, min_version: int, timeout: float | None) -> int:
        last = getattr(self._local, "last_plan", {}).get(name)
        self._local.prefetched = None
        self._local.waited = None
        if last is None or self.client.arena is None:  # remote: do not move bytes nobody may want
            return self.client.wait_version(layout_key(name), min_version, timeout)
        if name in self._local.__dict__.get("copies", ()):  # fetch_into copies straight from the arena
            v = self.client.wait_version(layout_key(name), min_version, timeout)
            self._local.waited = (name, v)
            return v
        key, reader = last
        try:
            v, cached, segments = self._reads().read(name, reader, None, min_version, timeout, key)
        except VersionGone:  # reclaimed under the read: the plain wait, the fetch reads again
            return self.client.wait_version(layout_key(name), min_version, timeout)
        self._local.prefetched = Prefetched(name, key, v, cached, segments)
        return v

    def layout(self, name: str, version: int | None = None) -> tuple[int, FlatLayout]:
        """The writer's layout of ``version`` (the newest when None): its commit record."""
        got = self._retry(lambda: self.client.get_versions([(layout_key(name), None)], version))
        return got.version, FlatLayout.from_json(json.loads(bytes(got.value[0])))

    def fetch(self, name: str, version: int | None = None,
              layout: ReaderLayout | Sequence[str] | None = None, share: bool = False) -> tuple[int, dict[str, torch.Tensor]]:
        """``(version, tensors)``: the whole version, the named tensors, or a reader layout's slices.

        ``share``: a tensor whose bytes lie whole in one zero-copy segment (a shard in this
        node's shared-memory arena) is a view of the store's memory, not a copy; it holds the
        version's lease while it lives (the worker does not reclaim those bytes). Read only.
        A version small enough to be copied from the worker's version board
        (``kilorl.store.client.board_reads.MAX_COPY``) is read that way, shared or not: its
        tensors are private copies, which cost less than a request for a lease."""
        return self._retry(lambda: self._read(name, version, reader_layout(layout), None, share))

    def fetch_into(self, name: str, out: Mapping[str, torch.Tensor], version: int | None = None,
                   layout: ReaderLayout | None = None) -> int:
        """Copy a version straight into ``out`` (e.g. ``dict(model.named_parameters())``); returns the version.

        ``layout``: a reader layout, or the names to read (all of ``out`` when None). A reader
        that copies every version into the same tensors pays the planning once
        (``kilorl.params.copy_in``)."""
        if layout is None or not isinstance(layout, Mapping):
            names = tuple(out) if layout is None else tuple(layout)
            layouts = self._local.__dict__.setdefault("named_layouts", {})
            reader = layouts.get(names)
            if reader is None:  # our own dict: never changed, so kept without a copy
                if len(layouts) >= 64:
                    layouts.clear()
                reader = layouts[names] = reader_layout(names)
            return self._retry(lambda: self._read(name, version, reader, out, own_layout=True))[0]
        return self._retry(lambda: self._read(name, version, layout, out))[0]

    def _take_prefetched(self, name: str, key: tuple, version: int | None) -> Prefetched | None:
        got = getattr(self._local, "prefetched", None)
        self._local.prefetched = None
        if got is not None and got.name == name and got.plan_key == key and version in (None, got.version):
            return got
        return None

    def _read(self, name: str, version: int | None, reader: ReaderLayout | None,
              out: Mapping[str, torch.Tensor] | None, share: bool = False,
              own_layout: bool = False) -> tuple[int, dict[str, torch.Tensor]]:
        key = plan_key(reader)
        if not hasattr(self._local, "last_plan"):
            self._local.last_plan = {}
        # a snapshot of the caller's layout (one of our own is never changed)
        self._local.last_plan[name] = (key, reader if own_layout or reader is None else dict(reader))
        if out is not None:
            v = self._read_into(name, key, version, out)
            if v is not None:
                return v, dict(out)
        got = self._take_prefetched(name, key, version)
        if got is not None:
            return got.version, self._assemble(name, got.cached, got.segments, out, share)
        for attempt in range(self.retries + 1):
            try:
                v, cached, segments = self._reads().read(name, reader, version, key=key)
            except VersionGone:
                latest = self.client.latest_version(layout_key(name))
                if latest is None:
                    # the worker restarted empty between our wait and this read: someone must republish
                    raise ParametersLost(f"{name}: the store worker restarted without the parameters") from None
                if version is not None and version >= latest and attempt < self.retries:
                    # a wait woke on the version board, which a publisher on the worker's host names
                    # before its commit: the version is coming (or just came), not gone (reclaimed
                    # ones are older than the latest)
                    self.client.wait_version(layout_key(name), version, self.reconnect_timeout_s, committed=True)
                    continue
                if version is not None or attempt == self.retries:
                    raise
                time.sleep(0)  # a newer version replaced it: read that one
                continue
            return v, self._assemble(name, cached, segments, out, share)
        raise AssertionError("unreachable")

    def _read_into(self, name: str, key: tuple, version: int | None, out: Mapping[str, torch.Tensor]) -> int | None:
        """A version copied straight from the node's arena into ``out`` by the runs of this
        thread's last copy of ``name`` (same plan, same tensors); None: read the usual way
        (which rewrites every byte of ``out``). Without a version: the newest, and at least
        the one the last ``wait`` returned."""
        waited, self._local.waited = getattr(self._local, "waited", None), None
        known = self._local.__dict__.get("copies", {}).get(name)
        if known is None or known.cached is not self._plans.get((name, key)) or not known.holds(out):
            return None
        board = known.on_board(name)
        if board is None:
            return None
        at_least = waited[1] if version is None and waited is not None and waited[0] == name else None
        return self.client.read_into(*board, version, at_least)

    def _assemble(self, name: str, cached: CachedPlan, segments: list[tuple[int, Any]],
                  out: Mapping[str, torch.Tensor] | None, share: bool) -> dict[str, torch.Tensor]:
        """The read's tensors; into ``out`` by the runs worked out for it (``CopyIn``) when it
        is the same plan and the same tensors as this thread's last copy of ``name``."""
        if out is None:
            return assemble(cached, segments, None, share)
        copies = self._local.__dict__.setdefault("copies", {})
        known = copies.get(name)
        if known is None or not known.fits(cached, segments, out):
            known = CopyIn.make(cached, segments, out)
            if known is None:
                copies.pop(name, None)
                return assemble(cached, segments, out, share)
            copies[name] = known
        known.apply(segments)
        return dict(out)


def _publish_batch(c: Any, items: list[tuple[str, Any, int]], kw: dict[str, Any]) -> None:
    """One pipelined batch on ``c``; a batch refused part way (a retry that finds some parts
    already there) is completed part by part, treating parts already there as done."""
    try:
        c.publish_many(items, **kw, on_board=True)
    except (InvalidRequest, BatchAborted):
        for key, value, v in items:
            publish_once(c, key, v, value, kw)
