"""Carrying out the monitor's migration decisions: a role predicted to run out of memory moves.

Once per monitor round (``monitor.prometheus.push_interval_s``) the driver asks every role
for its leak detectors' ``MemoryStatus`` (non-blocking: an answer queued behind a rollout is
read next round) and passes them to ``MigrationPolicy.decide`` (kilorl.monitor.migration).
A decision is carried out between two iterations of the data path (docs/monitor.md,
"Migration execution"):

* an actor: a replacement with the same index and a fresh seed is started on another node
  with room (hard ``NodeAffinitySchedulingStrategy``, the suspect node excluded) while the
  old actor goes on collecting; once the replacement answers ``ready()`` (checked every
  round), the old actor's rollouts in flight are waited for (they stay in the batch: env
  steps are counted from delivered rollouts only, never lost nor counted twice), the
  handle is swapped and the old actor killed;
* a learner: the run's checkpoint is written through the ``Checkpointer``, the replacement
  is built from that checkpoint on another node, publishes the current version again, is
  swapped in, and the old one is killed. With several learners the process group must
  re-form, so the whole group restarts from that checkpoint (the old group ended first, the
  other ranks in their own bundles); if it cannot, the run stops on that checkpoint;
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
* a store worker with no other worker to take its objects (the head's on one node): event
  ``no_room``, a clean checkpoint, and the run stops (never a crash); the run's last line
  and exit code say so (``kilorl.trainer.early_stop``).

Events go to ``kilorl_migration_events_total`` (the driver reports as role ``driver``), each
finished attempt to ``RUN_DIR/monitor/migrations.jsonl`` with the time from the decision to
the replacement serving.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kilorl.monitor.migration import MemoryStatus, MigrationDecision, MigrationPolicy
from kilorl.monitor.settings import MonitorConfig
from kilorl.roles.monitoring import node_label
from kilorl.trainer.learner_move import LearnerGroupLost, move_learner
from kilorl.trainer.replacement import available_per_node, ray_nodes, replacement_node

if TYPE_CHECKING:
    from kilorl.trainer.data_path import DataPath
    from kilorl.trainer.session import RoleSession

IN_PLACE = "restarted_in_place"
"""Outcome and event of a role restarted on its own node (no other node had room)."""

RESOURCE_KEYS = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
"""Ray ``.options`` resource arguments and the node resource each one takes."""


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
    in_place: bool = False
    """Restarted on its own node: the old actor has ended already, the new one is in the slot."""


@dataclass
class MigrationRecord:
    """One attempt, as written to ``migrations.jsonl``."""

    role: str
    rank: int
    outcome: str
    """``completed``, ``restarted_in_place``, ``failed`` or ``no_room``."""
    from_node: str
    to_node: str | None
    reason: str
    iteration: int
    """The last version published when the decision was taken."""
    env_steps: int
    """Env steps delivered when the decision was taken."""
    level_bytes: float
    """The suspect series' level at the decision."""
    limit_bytes: float | None
    decided_at: float
    """Wall clock of the decision."""
    serving_s: float | None
    """Seconds from the decision to the replacement serving (None when none serves)."""
    detail: str = ""


class Migrator:
    """The driver's migration executor for one role session."""

    def __init__(self, roles: RoleSession, config: MonitorConfig, run_dir: Path, save: Callable[[], Path]) -> None:
        self.roles, self.config, self.save = roles, config, save
        self.run_dir = Path(run_dir).resolve()
        self.policy = MigrationPolicy(config.migration)
        self.records: list[MigrationRecord] = []
        self.stop_reason: str | None = None
        """Set when the run must stop (no room, or a move that cannot be made): after a clean checkpoint."""
        self._asks: dict[tuple[str, int], Any] = {}
        self._status: dict[tuple[str, int], list[MemoryStatus]] = {}
        self._generation: dict[int, int] = {}
        self._metrics: Any = None
        self._next_round = 0.0
        self._pending: dict[int, PendingActor] = {}
        """Actor index -> its replacement, started and not yet serving."""

    # -- one monitor round ------------------------------------------------------------------------
    def round(self, loop: DataPath) -> bool:
        """Read the roles' memory verdicts and carry out what the policy decides; True: stop the run."""
        self._advance(loop)  # replacements started in earlier rounds: swap in those that serve
        now = time.monotonic()
        if now < self._next_round or self.stop_reason is not None:
            return self.stop_reason is not None
        self._next_round = now + self.config.prometheus.push_interval_s
        self._poll()
        decisions = self.policy.decide([s for v in self._status.values() for s in v], now)
        # an actor's move returns at once, a learner's blocks until its replacement serves: actors first,
        # so that a leaking actor is not left to grow while a learner restarts
        for decision in sorted(decisions, key=lambda d: d.role != "actor"):
            self._carry_out(decision, loop)
            if self.stop_reason is not None:
                break
        return self.stop_reason is not None

    def _handles(self) -> dict[tuple[str, int], Any]:
        return {**{("learner", r): h for r, h in enumerate(self.roles.learners)},
                **{("actor", i): h for i, h in enumerate(self.roles.actors)}}

    def _poll(self) -> None:
        """Ask every role without an open question; keep the answers that are in (none is waited for)."""
        import ray

        for key, handle in self._handles().items():
            if key not in self._asks:
                self._asks[key] = handle.memory_status.remote()
        refs = {ref: key for key, ref in self._asks.items()}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
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
    def _carry_out(self, d: MigrationDecision, loop: DataPath) -> None:
        t0, wall = time.monotonic(), time.time()
        self._event(d, "decided")
        status = next((s for s in self._status.get((d.role, d.rank), []) if s.memory == d.memory), None)
        record = MigrationRecord(d.role, d.rank, "failed", d.node, None, d.reason, loop.iteration, loop.env_steps,
                                 status.level_bytes if status else float("nan"),
                                 status.limit_bytes if status else None, wall, None)
        print(f"migration: decided to move {d.role}[{d.rank}] off node {d.node}: {d.reason}", flush=True)
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
            self._event(d, "started")
            if d.role == "actor":
                if target is None:
                    self._restart_actor_in_place(d, record, t0, loop, room)
                else:
                    self._start_actor(d, record, t0, target, options)
                return
            try:
                detail = room + move_learner(self, d, loop, target, options)
            except LearnerGroupLost as err:
                record.detail = room + str(err)
                self._lost(record, err.checkpoint)
                return
            except Exception as err:  # noqa: BLE001 - a failed move leaves the old role serving
                record.detail = f"{type(err).__name__}: {err}"
            else:
                record.outcome = "completed" if target is not None else IN_PLACE
                record.detail, record.serving_s = detail, time.monotonic() - t0
        if record.outcome not in ("completed", IN_PLACE):
            self.policy.forget(d.role, d.rank)
        self._event(d, record.outcome)
        self._finish(record)

    def _carry_out_store(self, d: MigrationDecision, record: MigrationRecord, t0: float) -> None:
        """A store worker hands its objects to the other workers and leaves (see the module docstring)."""
        reporter, fleet = self._store_reporter(), self.roles.fleet
        workers = reporter.workers
        live = [r for r in range(len(workers)) if r not in reporter.retired]
        node_id = workers[d.rank][0]
        if not fleet.nodes and fleet.local is None:  # kilorl train --store: the user's workers
            record.detail = "the store worker is not this run's (kilorl train --store): reported, not moved"
            self._event(d, "failed")
            self._finish(record)
            return
        if len(live) < 2:
            record.detail = "no other store worker to hand its objects to"
            self._stop(record, "no_room")
            return
        if node_id == fleet.connector.head:
            record.detail = "the head's store worker hosts the mesh's metastore; moving it is not built"
            self._stop(record, "failed")
            return
        record.to_node = node_label(fleet.connector.head)
        self._event(d, "started")
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
        self._event(d, record.outcome)
        self._finish(record)

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

    def _start_actor(self, d: MigrationDecision, record: MigrationRecord, t0: float, node_id: str,
                     options: dict[str, Any]) -> None:
        """Starts the replacement and returns: training goes on with the old actor until the
        replacement answers ``ready()`` (``_advance``, every round), then the two are swapped."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        i = d.rank
        generation = self._generation[i] = self._generation.get(i, 0) + 1
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        new = self.roles.spawn_actor(i, self.roles.actor_seed(i, generation),
                                     {**options, "scheduling_strategy": strategy}, replacement=True)
        deadline = time.monotonic() + self.config.migration.ready_timeout_s
        self._pending[i] = PendingActor(d, record, t0, new, new.ready.remote(), deadline,
                                        self.roles.actor_seed(i, generation))

    def _restart_actor_in_place(self, d: MigrationDecision, record: MigrationRecord, t0: float,
                                loop: DataPath, room: str) -> None:
        """No other node has room: the old actor ends first (its bundle is the room), a fresh one
        with a new seed starts in that bundle. Its unfinished rollouts are dropped and collected
        again from the new one, as a killed actor's are (``lost_rollouts``: never counted twice)."""
        import ray

        i = d.rank
        generation = self._generation[i] = self._generation.get(i, 0) + 1
        seed = self.roles.actor_seed(i, generation)
        in_flight = loop.in_flight(i)
        finished = ray.wait(in_flight, num_returns=len(in_flight), timeout=0)[0] if in_flight else []
        unfinished = len(in_flight) - len(finished)
        ray.kill(self.roles.actors[i])
        new = self.roles.spawn_actor(i, seed, self.bundle("actor", i), replacement=True)
        self.roles.actors[i] = new  # the loop collects the dropped rollouts again from the new handle
        self.forget_role("actor", i)
        record.detail = (f"{room}the old process ended first, {unfinished} unfinished rollout(s) of it dropped "
                         f"and collected again; replacement seed {seed}")
        deadline = time.monotonic() + self.config.migration.ready_timeout_s
        self._pending[i] = PendingActor(d, record, t0, new, new.ready.remote(), deadline, seed, in_place=True)

    def _advance(self, loop: DataPath) -> None:
        """Swaps in every replacement actor that serves; fails those past their deadline."""
        import ray

        for i, pm in list(self._pending.items()):
            done, _ = ray.wait([pm.ready], timeout=0)
            if not done and time.monotonic() < pm.deadline:
                continue
            del self._pending[i]
            if pm.in_place:
                self._advance_in_place(pm, done)
                continue
            try:
                if not done:
                    raise TimeoutError(f"the replacement did not start within {self.config.migration.ready_timeout_s:g}s")
                ray.get(pm.ready)
            except Exception as err:  # noqa: BLE001 - the old actor keeps serving
                ray.kill(pm.new)
                pm.record.detail = f"{type(err).__name__}: {err}"
                self.policy.forget(pm.decision.role, i)
            else:
                in_flight = loop.in_flight(i)  # the old actor's rollouts stay in their batches
                ray.wait(in_flight, num_returns=len(in_flight), timeout=self.config.migration.ready_timeout_s)
                old, self.roles.actors[i] = self.roles.actors[i], pm.new
                self.forget_role("actor", i)
                ray.kill(old)
                pm.record.outcome, pm.record.serving_s = "completed", time.monotonic() - pm.t0
                pm.record.detail = (f"replacement seed {pm.seed}, started while the old actor trained on; "
                                    f"{len(in_flight)} rollout(s) in flight kept")
            self._event(pm.decision, pm.record.outcome)
            self._finish(pm.record)

    def _advance_in_place(self, pm: PendingActor, done: list[Any]) -> None:
        """An actor restarted in place serves, or the run stops: its old process is gone already."""
        import ray

        try:
            if not done:
                raise TimeoutError(f"the replacement did not start within {self.config.migration.ready_timeout_s:g}s")
            ray.get(pm.ready)
        except Exception as err:  # noqa: BLE001 - no actor serves this slot any more
            ray.kill(pm.new)
            pm.record.detail += f"; the replacement failed: {type(err).__name__}: {err}"
            self._stop(pm.record, "failed")
            return
        pm.record.outcome, pm.record.serving_s = IN_PLACE, time.monotonic() - pm.t0
        self._event(pm.decision, IN_PLACE)
        self._finish(pm.record)

    def bundle(self, role: str, instance: int) -> dict[str, Any]:
        """The role's ``.options`` at start-up: its own placement-group bundle."""
        return dict(self.roles.placement.options(role, instance))

    def forget_role(self, role: str, rank: int) -> None:
        """The old process's verdicts and open question go with it."""
        self._asks.pop((role, rank), None)
        self._status.pop((role, rank), None)

    def _stop(self, record: MigrationRecord, outcome: str) -> None:
        """The fallback: a clean checkpoint, then the run stops."""
        record.outcome = outcome
        path = self.save()
        self.stop_reason = (f"{record.role}[{record.rank}] could not be moved off node {record.from_node} "
                            f"({record.detail}); checkpoint {path}; stopping the run")
        self._event_of(record.role, record.rank, outcome)
        self._finish(record)

    def _lost(self, record: MigrationRecord, checkpoint: Path) -> None:
        """A learner group that could not restart: the run stops on the checkpoint written before."""
        record.outcome = "failed"
        self.stop_reason = (f"{record.role}[{record.rank}] could not be moved off node {record.from_node} "
                            f"({record.detail}); checkpoint {checkpoint}; stopping the run")
        self._event_of(record.role, record.rank, "failed")
        self._finish(record)

    # -- reporting --------------------------------------------------------------------------------
    def _event(self, d: MigrationDecision, event: str) -> None:
        self._event_of(d.role, d.rank, event)

    def _event_of(self, role: str, rank: int, event: str) -> None:
        if self._metrics is None:  # the driver's own series appear with its first migration event
            from kilorl.monitor.runtime import role_metrics
            from kilorl.roles.monitoring import current_node

            self._metrics = role_metrics(self.run_dir, "driver", 0, current_node(), self.config)
        self._metrics.record_migration(role, rank, event)

    def _finish(self, record: MigrationRecord) -> None:
        self.records.append(record)
        path = self.run_dir / "monitor" / "migrations.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(asdict(record)) + "\n")
        took = f" in {record.serving_s:.1f} s" if record.serving_s is not None else ""
        print(f"migration: {record.role}[{record.rank}] {record.outcome}{took}: {record.from_node} -> "
              f"{record.to_node}; {record.detail}", flush=True)

    def close(self) -> None:
        """End replacements still starting (the run is over), send the last events, stop reporting."""
        import ray

        for pm in self._pending.values():
            ray.kill(pm.new)
            pm.record.detail = "the run ended before the replacement served"
            self._event(pm.decision, "failed")
            self._finish(pm.record)
        self._pending = {}
        if self._metrics is not None:
            self._metrics.push()
            self._metrics.close()
            self._metrics = None
