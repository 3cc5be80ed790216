"""Moving an actor (kilorl.trainer.migration): a replacement elsewhere, or a restart in place.

To another node the replacement starts while the old actor goes on collecting; once it
answers ``ready()`` the old actor's rollouts in flight are waited for (they stay in their
batches: env steps are counted from delivered rollouts only), the handle is swapped and the
old actor killed. In place (no other node has room) the old process ends first, at once,
whatever the data path is doing: its unfinished rollouts are dropped and collected again
from the new one (``lost_rollouts``, as for a killed actor), so a fast leak never waits for
the iteration to end. The same happens on a move to another node when the leak's forecast puts
the limit nearer than a replacement takes to start in this run (``Migrator.ends_first``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kilorl.trainer.migration_record import IN_PLACE, MigrationLog, MigrationRecord

if TYPE_CHECKING:
    from kilorl.monitor.migration import MigrationDecision, MigrationPolicy
    from kilorl.monitor.settings import MonitorConfig
    from kilorl.trainer.data_path import DataPath
    from kilorl.trainer.session import RoleSession


class Migrator(Protocol):
    """What an actor move needs of ``kilorl.trainer.migration.Migrator`` (named here, so the two
    modules do not import each other)."""

    config: MonitorConfig
    roles: RoleSession
    policy: MigrationPolicy
    log: MigrationLog

    def bundle(self, role: str, instance: int) -> dict[str, Any]: ...

    def forget_role(self, role: str, rank: int) -> None: ...

    def stop(self, record: MigrationRecord, outcome: str) -> None: ...

    start_times: list[float]


@dataclass
class PendingActor:
    """A replacement actor started by a decision, not yet swapped in."""

    decision: MigrationDecision
    record: MigrationRecord
    t0: float
    new: Any
    """The replacement's handle."""
    ready: Any
    """Its ``ready()`` reference."""
    deadline: float
    seed: int
    ended_first: str | None = None
    """The old actor has ended already and the new one is in the slot: the outcome once it serves
    (``restarted_in_place`` on its own node, ``completed`` on another); None: the old one serves on."""


class ActorMoves:
    """The replacement actors started by decisions, until each serves or fails."""

    def __init__(self, m: Migrator) -> None:
        self.m = m
        self.pending: dict[int, PendingActor] = {}
        """Actor index -> its replacement, started and not yet serving."""
        self._generation: dict[int, int] = {}

    def _next_seed(self, i: int) -> int:
        generation = self._generation[i] = self._generation.get(i, 0) + 1
        return self.m.roles.actor_seed(i, generation)

    def start(self, d: MigrationDecision, record: MigrationRecord, t0: float, node_id: str,
              options: dict[str, Any]) -> None:
        """Starts the replacement on ``node_id`` and returns: training goes on with the old actor
        until the replacement answers ``ready()`` (:meth:`advance`), then the two are swapped."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        i, seed = d.rank, self._next_seed(d.rank)
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        new = self.m.roles.spawn_actor(i, seed, {**options, "scheduling_strategy": strategy}, replacement=True)
        deadline = time.monotonic() + self.m.config.migration.ready_timeout_s
        self.pending[i] = PendingActor(d, record, t0, new, new.ready.remote(), deadline, seed)

    def restart_in_place(self, d: MigrationDecision, record: MigrationRecord, t0: float,
                         loop: DataPath, room: str, node_id: str | None = None,
                         options: dict[str, Any] | None = None) -> None:
        """The old actor ends first, a fresh one with a new seed takes its slot at once: in the old
        one's bundle (no other node has room: that bundle is the room), or on ``node_id`` (its
        limit is nearer than a replacement's start, so it cannot serve on until one does)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        i, seed = d.rank, self._next_seed(d.rank)
        in_flight = loop.in_flight(i)
        finished = ray.wait(in_flight, num_returns=len(in_flight), timeout=0)[0] if in_flight else []
        unfinished = len(in_flight) - len(finished)
        ray.kill(self.m.roles.actors[i])
        record.old_ended_s = time.monotonic() - t0
        where = (self.m.bundle("actor", i) if node_id is None
                 else {**(options or {}), "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)})
        new = self.m.roles.spawn_actor(i, seed, where, replacement=True)
        self.m.roles.actors[i] = new  # the loop collects the dropped rollouts again from the new handle
        self.m.forget_role("actor", i)
        record.detail = (f"{room}the old process ended first, {unfinished} unfinished rollout(s) of it dropped "
                         f"and collected again; replacement seed {seed}")
        deadline = time.monotonic() + self.m.config.migration.ready_timeout_s
        outcome = IN_PLACE if node_id is None else "completed"
        self.pending[i] = PendingActor(d, record, t0, new, new.ready.remote(), deadline, seed, ended_first=outcome)

    def advance(self, loop: DataPath) -> None:
        """Swaps in every replacement that serves; fails those past their deadline."""
        import ray

        for i, pm in list(self.pending.items()):
            done, _ = ray.wait([pm.ready], timeout=0)
            if not done and time.monotonic() < pm.deadline:
                continue
            del self.pending[i]
            if pm.ended_first is not None:
                self._advance_in_place(pm, done)
                continue
            try:
                if not done:
                    raise TimeoutError(f"the replacement did not start within {self.m.config.migration.ready_timeout_s:g}s")
                ray.get(pm.ready)
            except Exception as err:  # noqa: BLE001 - the old actor keeps serving
                ray.kill(pm.new)
                pm.record.detail = f"{type(err).__name__}: {err}"
                self.m.policy.forget(pm.decision.role, i)
            else:
                in_flight = loop.in_flight(i)  # the old actor's rollouts stay in their batches
                ray.wait(in_flight, num_returns=len(in_flight), timeout=self.m.config.migration.ready_timeout_s)
                old, self.m.roles.actors[i] = self.m.roles.actors[i], pm.new
                self.m.forget_role("actor", i)
                ray.kill(old)
                pm.record.outcome, pm.record.serving_s = "completed", time.monotonic() - pm.t0
                self.m.start_times.append(pm.record.serving_s)
                pm.record.detail = (f"replacement seed {pm.seed}, started while the old actor trained on; "
                                    f"{len(in_flight)} rollout(s) in flight kept")
            self.m.log.event(pm.decision.role, pm.decision.rank, pm.record.outcome)
            self.m.log.finish(pm.record)

    def _advance_in_place(self, pm: PendingActor, done: list[Any]) -> None:
        """An actor whose old process ended first serves, or the run stops: no actor serves its slot."""
        import ray

        try:
            if not done:
                raise TimeoutError(f"the replacement did not start within {self.m.config.migration.ready_timeout_s:g}s")
            ray.get(pm.ready)
        except Exception as err:  # noqa: BLE001 - no actor serves this slot any more
            ray.kill(pm.new)
            pm.record.detail += f"; the replacement failed: {type(err).__name__}: {err}"
            self.m.stop(pm.record, "failed")
            return
        pm.record.outcome, pm.record.serving_s = pm.ended_first, time.monotonic() - pm.t0
        self.m.start_times.append(pm.record.serving_s)
        self.m.log.event(pm.decision.role, pm.decision.rank, pm.record.outcome)
        self.m.log.finish(pm.record)

    def close(self) -> None:
        """End replacements still starting (the run is over)."""
        import ray

        for pm in self.pending.values():
            ray.kill(pm.new)
            pm.record.detail = "the run ended before the replacement served"
            self.m.log.event(pm.decision.role, pm.decision.rank, "failed")
            self.m.log.finish(pm.record)
        self.pending = {}
