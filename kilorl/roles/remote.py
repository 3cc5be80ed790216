"""Thin shells the trainer hands to Ray: the driver imports this module, never torch.

Ray pickles a class by reference, so the driver only needs the shell; the heavy role
(torch, gymnasium, the algorithm) is imported inside the role's own process, in
parallel with every other role's start (docs/architecture.md, "Distributed engine").

With ``monitor=MonitorSpec(...)`` a shell also reports the role's metrics
(:mod:`kilorl.roles.monitoring`), by composition: the role gets a measuring wrapper
around its parameter store, the shell reports what the role returns.
"""

from __future__ import annotations

import time
from typing import Any

from kilorl.core import Actor, CheckpointFiles, Learner, Rollout, RolloutInfo
from kilorl.roles.rollout_transport import RolloutHandle


class ActorProcess(Actor):
    """An ``EnvRunner`` built in the Ray actor's process (the ``actor`` role)."""

    def __init__(self, cfg: Any, store: Any, index: int, *args: Any, monitor: Any = None,
                 replay_prefix: str | None = None, **kwargs: Any) -> None:
        """``replay_prefix``: the run's replay tables' names; with it, and a table whose env
        runners insert themselves (``store_replay.actors_insert``), each rollout's rows go
        into this node's shard and ``collect`` returns a ``ReplayInsert`` instead."""
        if several_policies(cfg) and cfg.multi_agent.hierarchy is not None:
            from kilorl.roles.option_rollouts import HierarchicalEnvRunner as EnvRunner
        elif several_policies(cfg):
            from kilorl.roles.policy_columns import MultiPolicyEnvRunner as EnvRunner
        else:
            from kilorl.roles.env_runner import EnvRunner

        self._report = None
        self._writer: Any = None
        self._inserts: Any = None
        if replay_prefix is not None:
            from kilorl.roles.store_replay import ActorInserts, actors_insert

            if actors_insert(cfg):
                from kilorl.roles.rollout_transport import store_client_of

                self._inserts = ActorInserts(cfg, store_client_of(store, "replay_buffer.backend"), replay_prefix,
                                             index)
        if self._inserts is None and cfg.store.transport == "store":
            from kilorl.roles.rollout_transport import StoreRolloutWriter, store_client_of

            self._writer = StoreRolloutWriter(store_client_of(store), index)  # the unwrapped store's client
        if monitor is not None:
            from kilorl.roles.monitoring import ActorReporting

            self._report = ActorReporting(monitor, index, store)
            store = self._report.store
        self._role = EnvRunner(cfg, store, index, *args, **kwargs)

    def ready(self) -> int:
        return self._role.ready()

    def collect(self, min_version: int, env_steps: int = 0) -> tuple[Any, RolloutInfo]:
        """The rollout itself (``store.transport: ray``), a handle to its store object, or (env
        runners inserting into their node's replay shard) a ``ReplayInsert``: counts, no rows."""
        rollout, info = self._role.collect(min_version, env_steps)
        if self._report is not None:
            self._report.rollout(info)
        if self._inserts is not None:
            t0 = time.perf_counter()
            inserted = self._inserts.insert(rollout)
            info["handoff_s"] = time.perf_counter() - t0
            return inserted, info
        if self._writer is None:
            return rollout, info  # Ray moves the returned rollout after this call: no hand-off to time here
        t0 = time.perf_counter()
        handle = self._writer.put(rollout)
        info["handoff_s"] = time.perf_counter() - t0
        return handle, info

    def memory_status(self) -> list[Any]:
        """This role's leak-detector verdicts (``MemoryStatus``); empty with monitoring off."""
        return [] if self._report is None else self._report.memory_status()

    def pid(self) -> int:
        import os

        return os.getpid()

    def parameter_source(self) -> tuple[str, str]:
        """``(ray node id, address of the store worker this actor reads parameters from)``."""
        import ray

        return ray.get_runtime_context().get_node_id(), str(getattr(self._role.store.client, "address", ""))


def several_policies(cfg: Any) -> bool:
    """A run of several policies (``multi_agent.policies``): its roles are the per-policy ones."""
    return cfg.multi_agent is not None and cfg.multi_agent.several


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
        self._report: Any = None

    def rendezvous(self) -> tuple[str, int]:
        return rendezvous_here()

    def start(self, master: tuple[str, int] | None = None) -> None:
        if several_policies(self._args[0]):
            from kilorl.roles.policy_learners import PolicyLearners as LearnerRole
        else:
            from kilorl.roles.learner import LearnerRole

        args, kwargs = list(self._args), {**self._kwargs, "master": master}
        monitor = kwargs.pop("monitor", None)
        self._reader: Any = None
        if args[0].store.transport == "store":
            from kilorl.roles.rollout_transport import StoreRolloutReader, store_client_of

            self._reader = StoreRolloutReader(store_client_of(args[1]))  # before any measuring wrapper
        if monitor is not None:
            from kilorl.roles.monitoring import LearnerReporting

            rank = args[2] if len(args) > 2 else kwargs.get("rank", 0)
            self._report = LearnerReporting(monitor, rank, args[1])
            args[1] = self._report.store
        self._role = LearnerRole(*args, **kwargs)

    def memory_status(self) -> list[Any]:
        """This role's leak-detector verdicts (``MemoryStatus``); empty with monitoring off or before start."""
        return [] if self._report is None else self._report.memory_status()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def publish(self, version: int) -> None:
        self._role.publish(version)

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout | RolloutHandle) -> dict[str, float]:
        """Train on the rollouts; handles are read from the store and their keys deleted after."""
        handles = [r for r in rollouts if isinstance(r, RolloutHandle)]
        if handles and self._reader is None:
            raise RuntimeError("store.transport: this learner got rollout handles but was started with ray")
        try:
            got = [self._reader.get(r) if isinstance(r, RolloutHandle) else r for r in rollouts]
            stats = self._role.update(version, env_steps_total, *got)
        finally:
            if handles:
                self._reader.release(handles)
        if handles:
            stats = {**stats, **self._reader.take_stats()}
        if self._report is not None:
            self._report.update(stats)
        return stats

    def state(self) -> dict[str, Any]:
        return self._role.state()

    def checkpoint_files(self) -> CheckpointFiles:
        return self._role.checkpoint_files()

    def evaluate(self, episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        return self._role.evaluate(episodes, seed, deterministic)

    def policy_states(self) -> dict[str, dict[str, Any]]:
        """Several policies: this group's (``PolicyLearners.policy_states``)."""
        return self._role.policy_states()

    def evaluate_policies(self, states: dict[str, dict[str, Any]], episodes: int, seed: int,
                          deterministic: bool = True) -> Any:
        """Several policies: episodes with every group's states (``PolicyLearners.evaluate_policies``)."""
        return self._role.evaluate_policies(states, episodes, seed, deterministic)

    def weights_digest(self) -> float:
        return self._role.weights_digest()
