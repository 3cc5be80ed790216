"""Carrying out the monitor's migration decisions: a role predicted to run out of memory moves.

Once per monitor round (``monitor.prometheus.push_interval_s``) the driver asks every role
for its leak detectors' ``MemoryStatus`` and passes them to ``MigrationPolicy.decide``
(kilorl.monitor.migration). The question goes to the role's own Ray concurrency group
(``MONITOR_GROUP``), so a role answers while it collects or trains. Rounds run between
iterations and while the data path waits for rollouts or updates (``while_waiting``,
kilorl.trainer.waiting), so a fast leak is acted on within a round, not an iteration. An
actor is replaced at once, whatever the data path is doing; a learner or a store worker
only while no learner update is in flight (a decision taken during one waits for its end)
(docs/monitor.md, "Migration execution"):

* an actor: a replacement with the same index and a fresh seed is started on another node
  with room (hard ``NodeAffinitySchedulingStrategy``, the suspect node excluded) while the
  old actor goes on collecting, and swapped in once it serves (kilorl.trainer.actor_move);
* a learner: the run's checkpoint is written through the ``Checkpointer``, the replacement
  is built from that checkpoint on another node, publishes the current version again, is
  swapped in, and the old one is killed. With several learners the process group must
  re-form, so the whole group restarts from that checkpoint (the old group ended first, the
  other ranks in their own bundles); if it cannot, the run stops on that checkpoint;
* either of the two, when the forecast puts the limit nearer than a replacement takes to
  start in this run (``Migrator.ends_first``: the session's role start-up and every
  replacement so far, measured at the machine's load): the old process ends first, as in
  place below, and the replacement starts on the other node; outcome ``completed``;
* a store worker (not the head's, which hosts the mesh's metastore): it leaves the mesh
  gracefully, handing its records and objects to the other workers (their nodes have the
  room: the suspect node is the one left), and ends; the roles of its node fail over to
  another member's worker, and roles started there later use the head's
  (``StoreFleet.retire``). The move has served once the latest policy version reads whole
  through the driver's worker;
* no other node with room (one machine, or a full cluster): an actor or a learner restarts
  in place, on its own node in its own placement-group bundle, the old process ended
  first: an actor's unfinished rollouts are dropped and collected again from the new one
  (``lost_rollouts``, as for a killed actor), a learner's replacement starts from a fresh
  checkpoint (``kilorl.trainer.learner_move``); event and outcome ``restarted_in_place``;
  a learner's restart runs actor-only rounds while it waits for the new process (``wait_for``);
* a store worker with no other worker to take its objects (the head's on one node): with
  ``sync.durable`` it restarts in place, on its port, empty, and its durable objects come back
  from L2 (``StoreFleet.restart_in_place``; event and outcome ``restarted_in_place``); without,
  its objects would be lost: event ``no_room``, a clean checkpoint, and the run stops (never a
  crash); the run's last line and exit code say so (``kilorl.trainer.early_stop``).

Events and records: kilorl.trainer.migration_record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kilorl.monitor.migration import MemoryStatus, MigrationDecision, MigrationPolicy
from kilorl.monitor.settings import MonitorConfig
from kilorl.roles.monitoring import node_label
from kilorl.trainer.actor_move import ActorMoves
from kilorl.trainer.learner_move import LearnerGroupLost, move_learner
from kilorl.trainer.migration_record import IN_PLACE, MigrationLog, MigrationRecord
from kilorl.trainer.replacement import available_per_node, ray_nodes, replacement_node
from kilorl.trainer.session import MONITOR_GROUP
from kilorl.trainer.waiting import WAIT_TICK_S, RunStopped

if TYPE_CHECKING:
    from kilorl.trainer.data_path import DataPath
    from kilorl.trainer.session import RoleSession

__all__ = ["IN_PLACE", "MigrationRecord", "Migrator"]

ANSWER_WAIT_S = 0.2
"""How long a round waits for the roles' ``memory_status`` answers (an answer still out is read next round)."""

RESOURCE_KEYS = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
"""Ray ``.options`` resource arguments and the node resource each one takes."""


class Migrator:
    """The driver's migration executor for one role session."""

    def __init__(self, roles: RoleSession, config: MonitorConfig, run_dir: Path, save: Callable[[], Path]) -> None:
        self.roles, self.config, self.save = roles, config, save
        self.run_dir = Path(run_dir).resolve()
        self.policy = MigrationPolicy(config.migration)
        self.log = MigrationLog(self.run_dir, config)
        self.actors = ActorMoves(self)
        self.stop_reason: str | None = None
        """Set when the run must stop (no room, or a move that cannot be made): after a clean checkpoint."""
        self._asks: dict[tuple[str, int], Any] = {}
        self._status: dict[tuple[str, int], list[MemoryStatus]] = {}
        self._next_round = 0.0
        self._loop: DataPath | None = None
        """The data path of the last round (what a round inside a learner's restart works on)."""
        self.start_times: list[float] = []
        """Decision -> serving seconds of every replacement that served (``start_estimate_s``)."""
        self._deferred: list[tuple[MigrationDecision, float]] = []
        """Learner and store decisions taken while an update was in flight: carried out after it."""

    @property
    def records(self) -> list[MigrationRecord]:
        return self.log.records

    # -- one monitor round ------------------------------------------------------------------------
    def round(self, loop: DataPath, updating: bool = False) -> bool:
        """Read the roles' memory verdicts and carry out what the policy decides; True: stop the run.

        ``updating``: a learner update is in flight, so only actors are replaced now; other
        decisions wait for a round without one.
        """
        self._loop = loop
        self.actors.advance(loop)  # replacements started in earlier rounds: swap in those that serve
        if self.stop_reason is not None:
            return True
        if not updating and self._deferred:
            deferred, self._deferred = self._deferred, []
            self._carry_out_all(deferred, loop, updating, deferred=True)
        now = time.monotonic()
        if now < self._next_round or self.stop_reason is not None:
            return self.stop_reason is not None
        self._next_round = now + self.config.prometheus.push_interval_s
        self._poll()
        now = time.monotonic()  # the verdicts are in: the decision is taken now
        decisions = self.policy.decide([s for v in self._status.values() for s in v], now)
        self._carry_out_all([(d, now) for d in decisions], loop, updating)
        return self.stop_reason is not None

    def while_waiting(self, loop: DataPath, updating: bool) -> None:
        """The data path's ``on_wait`` hook: a round; a stop becomes ``RunStopped``."""
        if self.round(loop, updating):
            raise RunStopped(self.stop_reason or "")

    def wait_for(self, refs: list[Any], timeout: float) -> list[Any]:
        """``ray.get(refs, timeout=timeout)`` for a learner's restart, running actor-only rounds while it
        waits: a replacement learner takes seconds to a minute to start, a fast-leaking actor has less."""
        import ray

        deadline = time.monotonic() + timeout
        while len(ray.wait(refs, num_returns=len(refs), timeout=WAIT_TICK_S)[0]) < len(refs):
            if time.monotonic() > deadline:
                raise ray.exceptions.GetTimeoutError(f"not done within {timeout:g}s")
            if self._loop is not None:
                self.round(self._loop, updating=True)
        return ray.get(refs)

    def _carry_out_all(self, decisions: list[tuple[MigrationDecision, float]], loop: DataPath,
                       updating: bool, deferred: bool = False) -> None:
        """Each ``(decision, when it was taken)``; during an update only the actors' (the rest wait).
        ``deferred``: these waited for an update in flight."""
        # an actor's move returns at once, a learner's blocks until its replacement serves: actors first,
        # so that a leaking actor is not left to grow while a learner restarts
        for decision, decided in sorted(decisions, key=lambda x: x[0].role != "actor"):
            if updating and decision.role != "actor":
                self._deferred.append((decision, decided))
                continue
            self._carry_out(decision, loop, decided, deferred)
            if self.stop_reason is not None:
                break

    def _handles(self) -> dict[tuple[str, int], Any]:
        return {**{("learner", r): h for r, h in enumerate(self.roles.learners)},
                **{("actor", i): h for i, h in enumerate(self.roles.actors)}}

    def _poll(self) -> None:
        """Ask every role without an open question (in its own concurrency group, so it answers
        while busy); keep the answers that are in (none is waited for)."""
        import ray

        for key, handle in self._handles().items():
            if key not in self._asks:
                self._asks[key] = handle.memory_status.options(concurrency_group=MONITOR_GROUP).remote()
        refs = {ref: key for key, ref in self._asks.items()}
        # the roles answer from their own thread in milliseconds: read this round's answers in this round
        # (a round later is a second a 100 MiB/s leak does not have); one still out is read next round
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=ANSWER_WAIT_S)
        for ref in done:
            key = refs[ref]
            del self._asks[key]
            try:
                self._status[key] = list(ray.get(ref))
            except ray.exceptions.RayError:  # dead or restarting: no verdict this round
                self._status.pop(key, None)
        store = self._store_reporter()
        if store is not None:  # read by the driver itself, with the tier usage (kilorl.trainer.store_metrics)
            for rank, statuses in store.memory_status().items():
                self._status["store", rank] = statuses

    def _store_reporter(self) -> Any:
        monitor = getattr(self.roles, "monitor", None)
        return getattr(monitor, "store", None)

    # -- carrying a decision out ------------------------------------------------------------------
    def _carry_out(self, d: MigrationDecision, loop: DataPath, decided: float, deferred: bool = False) -> None:
        """``decided``: when the policy took ``d`` (monotonic): the record's times count from there;
        ``deferred``: it waited for a learner update in flight."""
        t0 = decided
        wall = time.time() - (time.monotonic() - decided)
        self.log.event(d.role, d.rank, "decided")
        status = next((s for s in self._status.get((d.role, d.rank), []) if s.memory == d.memory), None)
        record = MigrationRecord(d.role, d.rank, "failed", d.node, None, d.reason, loop.iteration, loop.env_steps,
                                 status.level_bytes if status else float("nan"),
                                 status.limit_bytes if status else None, wall, None)
        print(f"migration: decided to move {d.role}[{d.rank}] off node {d.node}: {d.reason}", flush=True)
        if deferred:  # a learner or store decision taken during an update
            record.reason += f"; carried out {time.monotonic() - decided:.1f} s later, after the learner update in flight"
        if d.role == "store":
            self._carry_out_store(d, record, t0)
            return
        if d.role not in ("actor", "learner"):
            record.detail = f"no migration for role {d.role!r}"
        else:
            options = self._options(d.role, d.rank)
            need = {RESOURCE_KEYS[k]: float(v) for k, v in options.items() if k in RESOURCE_KEYS and v}
            target = replacement_node(ray_nodes(), available_per_node(), need, exclude=d.node, role=d.role)
            # no other node has room: the role restarts on its own node, in its own bundle
            record.to_node = d.node if target is None else node_label(target)
            room = "" if target is not None else f"no other node has {need} free; "
            self.log.event(d.role, d.rank, "started")
            if d.role == "actor":
                if target is None:
                    self.actors.restart_in_place(d, record, t0, loop, room)
                elif self.ends_first(d):
                    self.actors.restart_in_place(d, record, t0, loop, self._near_limit(d) + ": ", target, options)
                else:
                    self.actors.start(d, record, t0, target, options)
                return
            try:
                def ended() -> None:
                    record.old_ended_s = time.monotonic() - t0

                first = target is not None and self.ends_first(d)
                detail = room + move_learner(self, d, loop, target, options, ended, end_first=first)
                detail += f" ({self._near_limit(d)})" if first else ""
            except LearnerGroupLost as err:
                record.detail = room + str(err)
                self._lost(record, err.checkpoint)
                return
            except Exception as err:  # noqa: BLE001 - a failed move leaves the old role serving
                record.detail = f"{type(err).__name__}: {err}"
            else:
                record.outcome = "completed" if target is not None else IN_PLACE
                record.detail, record.serving_s = detail, time.monotonic() - t0
                self.start_times.append(record.serving_s)
        if record.outcome not in ("completed", IN_PLACE):
            self.policy.forget(d.role, d.rank)
        self.log.event(d.role, d.rank, record.outcome)
        self.log.finish(record)

    def start_estimate_s(self) -> float:
        """How long a replacement takes to serve: ``migration.replacement_start_s``, or as measured in
        this run at the machine's load (the longest of the session's role start-up and every
        replacement that served so far)."""
        given = self.config.migration.replacement_start_s
        return given if given is not None else max([self.roles.times.spawn_s, *self.start_times])

    def ends_first(self, d: MigrationDecision) -> bool:
        """A move to another node keeps the old role serving until its replacement does, unless the
        forecast puts the limit nearer than a replacement's start: then the old process ends first
        (an actor's unfinished rollouts dropped and counted, a learner from its fresh checkpoint)."""
        return d.time_to_limit_s <= self.start_estimate_s()

    def _near_limit(self, d: MigrationDecision) -> str:
        return (f"limit in {d.time_to_limit_s:.0f} s, nearer than a replacement's start here "
                f"({self.start_estimate_s():.0f} s)")

    def _carry_out_store(self, d: MigrationDecision, record: MigrationRecord, t0: float) -> None:
        """A store worker hands its objects to the other workers and leaves (see the module docstring)."""
        reporter, fleet = self._store_reporter(), self.roles.fleet
        workers = reporter.workers
        live = [r for r in range(len(workers)) if r not in reporter.retired]
        node_id = workers[d.rank][0]
        if not fleet.nodes and fleet.local is None:  # kilorl train --store: the user's workers
            record.detail = "the store worker is not this run's (kilorl train --store): reported, not moved"
            self.log.event(d.role, d.rank, "failed")
            self.log.finish(record)
            return
        if len(live) < 2:
            if self.roles.cfg.sync.durable:  # its objects come back from L2: restart it where it is
                self._restart_store_in_place(d, record, t0, node_id)
                return
            record.detail = ("no other store worker to hand its objects to, and without sync.durable a restart "
                             "in place would lose them")
            self.stop(record, "no_room")
            return
        if node_id == fleet.connector.head:
            record.detail = "the head's store worker hosts the mesh's metastore; moving it is not built"
            self.stop(record, "failed")
            return
        record.to_node = node_label(fleet.connector.head)
        self.log.event(d.role, d.rank, "started")
        held = reporter.objects(d.rank)
        try:
            fleet.retire(node_id, timeout=self.config.migration.ready_timeout_s)
            reporter.retire(d.rank)
            self.forget_role("store", d.rank)
            version = self._read_latest_policy()
        except Exception as err:  # noqa: BLE001 - reported; the run goes on with the workers it has
            record.detail = f"{type(err).__name__}: {err}"
            self.policy.forget(d.role, d.rank)
        else:
            record.outcome, record.serving_s = "completed", time.monotonic() - t0
            record.detail = (f"{held if held is not None else 'its'} objects handed to the other "
                             f"{len(live) - 1} worker(s); policy version {version} reads whole without it")
        self.log.event(d.role, d.rank, record.outcome)
        self.log.finish(record)

    def _restart_store_in_place(self, d: MigrationDecision, record: MigrationRecord, t0: float, node_id: str) -> None:
        """The only store worker restarts on its own port, empty; its durable objects come back from
        L2 and every client reconnects (docs/architecture.md, "Store worker restarts")."""
        reporter, fleet = self._store_reporter(), self.roles.fleet
        record.to_node = record.from_node
        self.log.event(d.role, d.rank, "started")
        held = reporter.objects(d.rank)
        try:
            pid = fleet.restart_in_place(node_id, timeout=self.config.migration.ready_timeout_s)
            record.old_ended_s = time.monotonic() - t0  # (an upper bound: it ended before the new one served)
            reporter.restarted(d.rank)  # a fresh detector: the old process's history went with it
            self.forget_role("store", d.rank)
            version = self._read_latest_policy()
        except Exception as err:  # noqa: BLE001 - no worker may serve the run any more: stop on a checkpoint
            record.detail = f"the restart in place failed: {type(err).__name__}: {err}"
            self.stop(record, "failed")
            return
        record.outcome, record.serving_s = IN_PLACE, time.monotonic() - t0
        record.detail = (f"no other store worker to hand its objects to; the old process ended first "
                         f"({held if held is not None else 'its'} objects), the new one (pid {pid}) recovered "
                         f"the durable ones from L2; policy version {version} reads whole")
        self.log.event(d.role, d.rank, IN_PLACE)
        self.log.finish(record)

    def _read_latest_policy(self) -> int:
        """The newest policy version, fetched whole through the driver's worker (the hand-off kept it)."""
        from kilorl.algos import keys

        store = self.roles.store
        latest = store.latest_version(keys.POLICY)
        if latest is None:
            raise RuntimeError("no policy version is readable after the store worker left")
        version, _ = store.fetch(keys.POLICY, latest)
        return version

    def _options(self, role: str, instance: int) -> dict[str, Any]:
        """The role's resources as at start-up (its placement group bundle), without the group."""
        opts = dict(self.roles.placement.options(role, instance))
        opts.pop("scheduling_strategy", None)
        return opts

    def bundle(self, role: str, instance: int) -> dict[str, Any]:
        """The role's ``.options`` at start-up: its own placement-group bundle."""
        return dict(self.roles.placement.options(role, instance))

    def forget_role(self, role: str, rank: int) -> None:
        """The old process's verdicts and open question go with it."""
        self._asks.pop((role, rank), None)
        self._status.pop((role, rank), None)

    def stop(self, record: MigrationRecord, outcome: str) -> None:
        """The fallback: a clean checkpoint, then the run stops."""
        record.outcome = outcome
        path = self.save()
        self.stop_reason = (f"{record.role}[{record.rank}] could not be moved off node {record.from_node} "
                            f"({record.detail}); checkpoint {path}; stopping the run")
        self.log.event(record.role, record.rank, outcome)
        self.log.finish(record)

    def _lost(self, record: MigrationRecord, checkpoint: Path) -> None:
        """A learner group that could not restart: the run stops on the checkpoint written before."""
        record.outcome = "failed"
        self.stop_reason = (f"{record.role}[{record.rank}] could not be moved off node {record.from_node} "
                            f"({record.detail}); checkpoint {checkpoint}; stopping the run")
        self.log.event(record.role, record.rank, "failed")
        self.log.finish(record)

    def close(self) -> None:
        """End replacements still starting (the run is over), send the last events, stop reporting."""
        self.actors.close()
        self.log.close()
