"""The run's store workers: one per Ray node (started and stopped by the run), or given ones.

``StoreFleet.start`` pins one ``StoreNode`` actor to every live Ray node with a hard
``NodeAffinitySchedulingStrategy``; the first worker is the mesh's ``--head``, the others
``--join`` it. ``StoreFleet.local`` is the one-machine case where the run starts Ray
itself: the driver starts the worker before Ray (``WorkerProcess``), so the worker's
start-up overlaps Ray's instead of preceding the roles'. ``StoreFleet.external`` uses
workers the user already runs (``kilorl train --store HOST:PORT``) and starts nothing.
Either way roles get a ``NodeConnector`` that reaches their own node's worker.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from kilorl.roles.store_node import NodeConnector, WorkerProcess, token_from_env
from kilorl.store.client.reconnect import RECONNECT_TIMEOUT_S


@dataclass
class StoreFleet:
    """Store workers of one run and how roles reach them."""

    connector: NodeConnector
    nodes: list[Any] = field(default_factory=list)
    """``StoreNode`` actor handles this run started (empty for external workers)."""
    local: WorkerProcess | None = None
    """The worker the driver started on its own node (``StoreFleet.local``), if any."""

    @classmethod
    def external(cls, address: str, token: str | None) -> StoreFleet:
        from kilorl.store.wire.protocol import parse_address

        try:
            parse_address(address)
        except Exception as err:  # noqa: BLE001 - re-raised with the field's name
            raise ValueError(f"store.address: expected HOST:PORT, got {address!r} ({err})") from None
        return cls(NodeConnector({}, address, token or token_from_env()))

    @classmethod
    def start_local(cls, shm_size: str, keep_versions: int, l2_dir: str | None = None,
                    extra: dict[int, list[str]] | None = None,
                    reconnect_timeout_s: float = RECONNECT_TIMEOUT_S) -> StoreFleet:
        """Start this machine's worker now (loopback), before Ray; ``attach`` names its node.
        ``extra``: further worker options per store rank (this worker is rank 0);
        ``reconnect_timeout_s``: ``store.reconnect_timeout_s`` (``worker_options``)."""
        token = secrets.token_hex(16)
        worker = WorkerProcess("127.0.0.1", token, shm_size, keep_versions, None, f"run-{secrets.token_hex(4)}",
                               l2_dir=None if l2_dir is None else f"{l2_dir}/local",
                               extra=worker_options(reconnect_timeout_s, (extra or {}).get(0)))
        return cls(NodeConnector({}, "", token), local=worker)

    def attach(self, node_id: str) -> None:
        """The local worker serves Ray node ``node_id`` (the driver's): roles there read its info file."""
        assert self.local is not None
        self.connector.files[node_id] = str(self.local.info_file)
        self.connector.head = node_id

    @classmethod
    def start(cls, shm_size: str, keep_versions: int, nodes: list[str] | None = None,
              l2_dir: str | None = None, wait: bool = True, extra: dict[int, list[str]] | None = None,
              reconnect_timeout_s: float = RECONNECT_TIMEOUT_S,
              node_options: dict[str, dict[str, Any]] | None = None) -> StoreFleet:
        """One worker per live Ray node (or per id in ``nodes``), the first as the mesh head.
        ``extra``: further worker options per store rank (the order of ``workers()``);
        ``reconnect_timeout_s``: ``store.reconnect_timeout_s`` (``worker_options``);
        ``node_options``: Ray node id -> the ``.options(...)`` its worker's actor is created
        with (a parameter-server bundle, ``RolePlacement.store_worker_options``); other
        nodes' workers take no resources and are pinned by node affinity.

        With ``wait=False`` the workers are only created: the caller starts its roles at
        once (their connector resolves its node's address on first use) and waits on
        ``ready()`` together with them. Handles are recorded as they are created, so
        ``close`` after a failed start still stops every worker that came up.
        """
        fleet = cls(NodeConnector({}, "", secrets.token_hex(16)))
        try:
            fleet._spawn(shm_size, keep_versions, nodes or _live_node_ids(), l2_dir, extra or {}, reconnect_timeout_s,
                         node_options or {})
            if wait:
                fleet.resolve()
        except BaseException:
            fleet.close()
            raise
        return fleet

    def _spawn(self, shm_size: str, keep_versions: int, node_ids: list[str], l2_dir: str | None,
               extra: dict[int, list[str]], reconnect_timeout_s: float,
               node_options: dict[str, dict[str, Any]]) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from kilorl.roles.store_node import StoreNode

        remote = ray.remote(num_cpus=0, max_restarts=0)(StoreNode)
        name = f"run-{secrets.token_hex(4)}"
        token = self.connector.token

        def make(node_id: str, join: Any) -> Any:
            l2 = None if l2_dir is None else f"{l2_dir}/{node_id[:12]}"
            opts = node_options.get(node_id) or {
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
            handle = remote.options(**opts).remote(
                token, shm_size, keep_versions, join, name, l2_dir=l2,
                extra=worker_options(reconnect_timeout_s, extra.get(len(self.nodes))))
            self.nodes.append(handle)
            self.connector.nodes[node_id] = handle
            return handle

        head = make(node_ids[0], None)
        self.connector.head = node_ids[0]
        for n in node_ids[1:]:  # each joiner waits for the head inside its own process
            make(n, head)

    def ready(self) -> dict[str, Any]:
        """One reference per ``StoreNode`` worker (``where()``), named for start-up errors."""
        return {f"store worker on node {n[:12]}": h.where.remote() for n, h in self.connector.nodes.items()}

    def resolve(self) -> None:
        """Wait for every worker and record its address (the head's is the default)."""
        import ray

        c = self.connector
        if self.local is not None:
            address = self.local.wait_ready()  # raises with the worker's log if it died
            c.addresses.update(dict.fromkeys(c.files, address))
        for node, address in ray.get(list(self.ready().values())):
            c.addresses[node] = address
        if c.head:
            c.default = c.addresses[c.head]

    def workers(self) -> list[tuple[str, str]]:
        """``(Ray node id, address)`` of every worker this run knows, the head first: the
        order of the store ranks in metrics and migrations. Resolved workers only."""
        c = self.connector
        order = [c.head, *(n for n in c.addresses if n != c.head)] if c.head else list(c.addresses)
        return [(n, c.addresses[n]) for n in order if n in c.addresses]

    def retire(self, node_id: str, timeout: float = 60.0) -> str:
        """Ends ``node_id``'s worker gracefully, for good: it hands its records and objects to
        the other workers first. Roles created from now on use the head's worker on that
        node; clients already connected fail over to another member (``StoreClient``).
        Not the head's worker (it hosts the mesh's metastore). Returns the new address."""
        import ray

        c = self.connector
        if node_id == c.head:
            raise ValueError("the head's store worker hosts the mesh's metastore and cannot be retired")
        handle = c.nodes.get(node_id)
        if handle is None:
            raise ValueError(f"node {node_id[:12]} has no store worker this run started")
        code = ray.get(handle.retire.remote(timeout), timeout=timeout + 15)
        if code not in (0, None):
            raise RuntimeError(f"the store worker of node {node_id[:12]} exited with {code} during its hand-off")
        c.addresses[node_id] = c.addresses[c.head]
        del c.nodes[node_id]  # its actor stays in ``nodes`` until close()
        return c.addresses[node_id]

    def restart_in_place(self, node_id: str, timeout: float = 60.0) -> int:
        """Restarts ``node_id``'s worker on its own port, empty (durable objects come back from
        L2), without injected faults: the way out for a leaking worker that no other worker can
        take the objects of. Clients reconnect to the same address. The new worker's pid."""
        import ray

        if self.local is not None and self.connector.files.get(node_id) == str(self.local.info_file):
            return self.local.restart_in_place(timeout)
        handle = self.connector.nodes.get(node_id) or next(
            (n for n in self.nodes if ray.get(n.where.remote(), timeout=timeout)[0] == node_id), None)
        if handle is None:
            raise ValueError(f"node {node_id[:12]} has no store worker this run started")
        return int(ray.get(handle.restart_in_place.remote(timeout), timeout=timeout + 15))

    def pids(self) -> list[int]:
        import ray

        return ([self.local.pid()] if self.local else []) + ray.get([n.pid.remote() for n in self.nodes])

    def restarts(self) -> list[int]:
        """Per node, how often its worker died and was restarted."""
        import ray

        return ([self.local.restarts] if self.local else []) + ray.get([n.restart_count.remote() for n in self.nodes])

    def close(self) -> None:
        """Stop the workers this run started (killing a node's actor kills its worker too)."""
        if self.local is not None:
            self.local.stop()
            self.local = None
        if not self.nodes:
            return
        import ray

        if ray.is_initialized():
            try:
                ray.get([n.stop.remote() for n in self.nodes], timeout=15)
            except Exception:  # noqa: BLE001 - a dead node actor took its worker with it
                pass
            for n in self.nodes:
                try:
                    ray.kill(n)
                except Exception:  # noqa: BLE001 - already dead is the goal
                    pass
        self.nodes = []


def worker_options(reconnect_timeout_s: float, extra: list[str] | None = None) -> list[str]:
    """Options of every worker a run starts: a remote read rides out a holder that restarts
    for as long as a client rides out its own worker (``--get-timeout``), then ``extra``."""
    return ["--get-timeout", f"{reconnect_timeout_s:g}", *(extra or [])]


def _live_node_ids() -> list[str]:
    import ray

    here = ray.get_runtime_context().get_node_id()
    ids = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    return sorted(ids, key=lambda i: i != here)  # the driver's node hosts the head
