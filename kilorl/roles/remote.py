"""Thin shells the trainer hands to Ray: the driver imports this module, never torch.

Ray pickles a class by reference, so the driver only needs the shell; the heavy role
(torch, gymnasium, the algorithm) is imported inside the role's own process, in
parallel with every other role's start (docs/architecture.md, "Distributed engine").
"""

from __future__ import annotations

from typing import Any

from kilorl.core import Actor, Learner, Rollout, RolloutInfo
from kilorl.roles.rollout_transport import RolloutHandle


class ActorProcess(Actor):
    """A ``RolloutWorker`` built in the Ray actor's process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from kilorl.roles.actor import RolloutWorker

        self._role = RolloutWorker(*args, **kwargs)
        self._writer: Any = None
        if self._role.cfg.store.transport == "store":
            from kilorl.roles.rollout_transport import StoreRolloutWriter, store_client_of

            self._writer = StoreRolloutWriter(store_client_of(self._role.store), self._role.index)

    def ready(self) -> int:
        return self._role.ready()

    def collect(self, min_version: int) -> tuple[Rollout | RolloutHandle, RolloutInfo]:
        """The rollout itself (``store.transport: ray``) or a handle to its store object."""
        rollout, info = self._role.collect(min_version)
        return (rollout if self._writer is None else self._writer.put(rollout)), info

    def pid(self) -> int:
        import os

        return os.getpid()

    def parameter_source(self) -> tuple[str, str]:
        """``(ray node id, address of the store worker this actor reads parameters from)``."""
        import ray

        return ray.get_runtime_context().get_node_id(), str(getattr(self._role.store.client, "address", ""))


def rendezvous_here() -> tuple[str, int]:
    """This node's address and a port free on it: where rank 0 hosts the process group.

    Chosen in rank 0's own process, so learners on other nodes can reach it (a driver-side
    ``127.0.0.1`` and driver port would only work when every learner shares the driver's node).
    """
    import socket

    try:
        import ray

        host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
    except ImportError:
        host = "127.0.0.1"
    with socket.socket() as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


class LearnerProcess(Learner):
    """A ``LearnerRole`` built in the Ray actor's process.

    Built in two steps so that several learners can meet: ``rendezvous()`` on rank 0 names
    an address on rank 0's node, then ``start(master)`` on every rank builds the role.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._role: Any = None

    def rendezvous(self) -> tuple[str, int]:
        return rendezvous_here()

    def start(self, master: tuple[str, int] | None = None) -> None:
        from kilorl.roles.learner import LearnerRole

        self._role = LearnerRole(*self._args, **{**self._kwargs, "master": master})
        self._reader: Any = None
        if self._role_cfg().store.transport == "store":
            from kilorl.roles.rollout_transport import StoreRolloutReader, store_client_of

            self._reader = StoreRolloutReader(store_client_of(self._role.store))

    def _role_cfg(self) -> Any:
        return self._args[0] if self._args else self._kwargs["cfg"]

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def publish(self, version: int) -> None:
        self._role.publish(version)

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout | RolloutHandle) -> dict[str, float]:
        """Train on the rollouts; handles are read from the store and their keys deleted after."""
        handles = [r for r in rollouts if isinstance(r, RolloutHandle)]
        if not handles:
            return self._role.update(version, env_steps_total, *rollouts)
        if self._reader is None:
            raise RuntimeError("store.transport: this learner got rollout handles but was started with ray")
        try:
            got = [self._reader.get(r) if isinstance(r, RolloutHandle) else r for r in rollouts]
            stats = self._role.update(version, env_steps_total, *got)
        finally:
            self._reader.release(handles)
        return {**stats, **self._reader.take_stats()}

    def state(self) -> dict[str, Any]:
        return self._role.state()

    def weights_digest(self) -> float:
        return self._role.weights_digest()
