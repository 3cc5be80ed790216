"""The run's store workers: one per Ray node (started and stopped by the run), or given ones.

``StoreFleet.start`` pins one ``StoreNode`` actor to every live Ray node with a hard
``NodeAffinitySchedulingStrategy``; the first worker is the mesh's ``--head``, the others
``--join`` it. ``StoreFleet.external`` uses workers the user already runs
(``kilorl train --store HOST:PORT``) and starts nothing. Either way roles get a
``NodeConnector`` that reaches their own node's worker.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from kilorl.roles.store_node import NodeConnector, token_from_env


@dataclass
class StoreFleet:
    """Store workers of one run and how roles reach them."""

    connector: NodeConnector
    nodes: list[Any] = field(default_factory=list)
    """``StoreNode`` actor handles this run started (empty for external workers)."""

    @classmethod
    def external(cls, address: str, token: str | None) -> StoreFleet:
        from kilorl.store.wire.protocol import parse_address

        try:
            parse_address(address)
        except Exception as err:  # noqa: BLE001 - re-raised with the field's name
            raise ValueError(f"store.address: expected HOST:PORT, got {address!r} ({err})") from None
        return cls(NodeConnector({}, address, token or token_from_env()))

    @classmethod
    def start(cls, shm_size: str, keep_versions: int, nodes: list[str] | None = None,
              l2_dir: str | None = None) -> StoreFleet:
        """One worker per live Ray node (or per id in ``nodes``), the first as the mesh head.

        Handles are recorded as they are created, so ``close`` after a failed start still
        stops every worker that came up.
        """
        fleet = cls(NodeConnector({}, "", secrets.token_hex(16)))
        try:
            fleet._spawn(shm_size, keep_versions, nodes or _live_node_ids(), l2_dir)
        except BaseException:
            fleet.close()
            raise
        return fleet

    def _spawn(self, shm_size: str, keep_versions: int, node_ids: list[str], l2_dir: str | None) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from kilorl.roles.store_node import StoreNode

        remote = ray.remote(num_cpus=0, max_restarts=0)(StoreNode)
        name = f"run-{secrets.token_hex(4)}"
        token = self.connector.token

        def make(node_id: str, join: str | None) -> Any:
            l2 = None if l2_dir is None else f"{l2_dir}/{node_id[:12]}"
            handle = remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(
                token, shm_size, keep_versions, join, name, l2_dir=l2)
            self.nodes.append(handle)
            return handle

        head = make(node_ids[0], None)
        node, address = ray.get(head.where.remote())
        self.connector.addresses[node] = address
        self.connector.default = address
        for node, address in ray.get([make(n, address).where.remote() for n in node_ids[1:]]):
            self.connector.addresses[node] = address

    def pids(self) -> list[int]:
        import ray

        return ray.get([n.pid.remote() for n in self.nodes])

    def restarts(self) -> list[int]:
        """Per node, how often its worker died and was restarted."""
        import ray

        return ray.get([n.restart_count.remote() for n in self.nodes])

    def close(self) -> None:
        """Stop the workers this run started (killing the actor kills its worker too)."""
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


def _live_node_ids() -> list[str]:
    import ray

    here = ray.get_runtime_context().get_node_id()
    ids = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    return sorted(ids, key=lambda i: i != here)  # the driver's node hosts the head
