"""Start-up and teardown of a run's roles, as one context manager.

Everything a run starts (Ray, if it was not running; one store worker per node, started
by the driver itself when it starts Ray on this machine; the learners; the actors) is
started inside ``RoleSession.__enter__`` and recorded as it is created, so a failure at
any point (an env that raises in ``reset``, a learner that cannot build its model,
Ctrl-C) tears down exactly what was started and nothing else.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kilorl.config import Config
from kilorl.config_policies import learner_roles
from kilorl.trainer.cluster import Cluster

if TYPE_CHECKING:
    from kilorl.trainer.monitoring import SessionMonitor
    from kilorl.trainer.store_fleet import StoreFleet


ACTOR_MAX_RESTARTS = 3
"""Times Ray restarts one actor process that died (kill -9, OOM) before the run gives up."""

MONITOR_GROUP = "monitor"
"""The Ray concurrency group of a role's ``memory_status``: its own thread, so the role answers
while a ``collect`` or an ``update`` runs (kilorl.trainer.migration)."""
ROLE_CONCURRENCY = {MONITOR_GROUP: 1}


class StartupError(RuntimeError):
    """A role failed to start; the message names the role and the cause."""


@dataclass
class StartupTimes:
    """Where start-up went (seconds), reported with the first metrics row."""

    ray_s: float = 0.0
    """Connecting to (or starting) Ray."""
    spawn_s: float = 0.0
    """From the first role creation to every role built and version 0 published."""
    total_s: float = 0.0

    def as_row(self) -> dict[str, float]:
        return {"startup_ray_s": self.ray_s, "startup_roles_s": self.spawn_s}


@dataclass
class RoleSession:
    """The running roles of one run. ``with RoleSession(...) as roles:`` starts and stops them."""

    cfg: Config
    cluster: Cluster
    state: dict[str, Any] | None = None
    """Learner state to resume from (a checkpoint), or None for a fresh start."""
    iteration: int = 0
    """First version to publish (the resumed iteration)."""
    run_dir: Path | None = None
    """The run's directory (the monitor keeps its targets file there)."""
    monitor: SessionMonitor | None = None
    """Node exporters and discovery when ``monitor.prometheus.enabled`` (kilorl.trainer.monitoring)."""
    store: Any = None
    learners: list[Any] = field(default_factory=list)
    actors: list[Any] = field(default_factory=list)
    times: StartupTimes = field(default_factory=StartupTimes)
    placement: Any = None
    """The roles' reserved placement groups (``role_placement.RolePlacement``)."""
    fleet: Any = None
    """The run's store workers (``StoreFleet``). One given here (this machine's, from
    ``start_local_store``, started before Ray) is the session's from then on: it closes it."""
    l2_dir: str | None = None
    """Where the run's store workers keep durable (``sync.durable``) parameters."""
    resumed_versions: int = 0
    """Versions a durable resume skipped past the checkpoint (see ``_durable_version``)."""
    backend: str = "gloo"
    """The learners' torch.distributed backend (resolved at start-up)."""
    replay_prefix: str = ""
    """The run's replay tables' names in the store workers, from ``run_dir`` (a resumed run
    finds its durable tables again); set at start-up."""
    _started_ray: bool = False

    def __enter__(self) -> RoleSession:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------------------------
    def _start(self) -> None:
        import ray

        from kilorl.trainer.role_placement import RolePlacementError, local_needs, reserve

        cfg, par = self.cfg, self.cfg.parallelism
        t0 = time.perf_counter()
        if not self.replay_prefix:
            from kilorl.roles.store_replay import table_prefix

            self.replay_prefix = table_prefix(self.run_dir)
        if self.fleet is None and needs_local_store(cfg, self.cluster):
            self.fleet = start_local_store(cfg, self.l2_dir)  # before Ray: it comes up while Ray does
        self._started_ray = self.cluster.connect(*local_needs(cfg))
        t1 = time.perf_counter()
        self.times.ray_s = t1 - t0
        try:
            self.placement = reserve(cfg)
        except RolePlacementError as err:
            raise StartupError(str(err)) from err
        if cfg.monitor.prometheus.enabled:  # imported only then: prometheus_client stays out of plain runs
            from kilorl.trainer.monitoring import start_monitoring

            self.monitor = start_monitoring(self.run_dir, cfg.monitor)
            self.monitor.start()
        if self.fleet is None:
            self.fleet = self._store_fleet()
        else:
            self.fleet.attach(ray.get_runtime_context().get_node_id())
        self.store = parameter_store(cfg, self.fleet, self.placement.shard_nodes())
        weights_version = self._durable_version()
        self.backend = self.cluster.backend_for(cfg.train.device)
        policies = learner_roles(cfg)
        for role, policy in policies.items():  # several policies: a learner group each, on its planned nodes
            self.learners += [self.spawn_learner(r, self.state, self.placement.options(role, r),
                                                 weights_version=weights_version, policies=[policy])
                              for r in range(par.learner)]
        for r in range(0 if policies else par.learner):
            self.learners.append(self.spawn_learner(r, self.state, self.placement.options("learner", r),
                                                    weights_version=weights_version))
        # Fresh seeds after a resume, so a continued run does not replay the same episodes.
        for i in range(par.actor):
            self.actors.append(self.spawn_actor(i, self.actor_seed(i), self.placement.options("actor", i)))
        # Each group's rank 0 names its rendezvous on its own node (a process group per policy);
        # every rank then builds its role.
        groups = [self.learners[g:g + par.learner] for g in range(0, len(self.learners), par.learner)]
        masters = [ray.get(group[0].rendezvous.remote()) if par.learner > 1 else None for group in groups]
        starts = [h.start.remote(master) for group, master in zip(groups, masters, strict=True) for h in group]
        # All roles start in parallel; start-up ends when every one is built and the first
        # version is published, so process spawn and imports are not counted as training.
        waits = {**self.fleet.ready(), **{f"learner {r}": ref for r, ref in enumerate(starts)}}
        # every rank publishes once (rank 0 writes; all start their warm-up); runs after start
        waits.update({f"learner {r} (first publish)": h.publish.remote(self.iteration)
                      for r, h in enumerate(self.learners)})
        waits.update({f"actor {i}": h.ready.remote() for i, h in enumerate(self.actors)})
        if self.fleet.local is not None:
            try:  # up long before the roles, usually; a worker that died fails the start here, not in a role
                self.fleet.local.wait_ready()
            except (RuntimeError, TimeoutError) as err:
                raise StartupError(f"the store worker failed to start: {err}") from err
        self._wait_all(waits)
        self.fleet.resolve()  # every worker answered above: records the addresses at once
        if self.monitor is not None:
            c = self.fleet.connector
            self.monitor.watch_store(self.fleet.workers() or [(ray.get_runtime_context().get_node_id(), c.default)],
                                     c.token)
        self.times.spawn_s = time.perf_counter() - t1
        self.times.total_s = time.perf_counter() - t0

    def plan(self) -> dict[str, list[str]]:
        """Role -> the node of each instance as planned and reserved (``kilorl train`` prints
        it; the roles run there, and ``kilorl plan --address`` gives the same)."""
        from kilorl.trainer.role_placement import plan_summary

        return plan_summary(self.placement.placement)

    def _durable_version(self) -> int | None:
        """With ``sync.durable``, a resumed run whose store kept a version newer than its
        checkpoint continues from that version: the learners take its weights and
        normalizers (optimizer moments and RNG stay the checkpoint's), ``iteration``
        moves there and ``resumed_versions`` says by how many versions."""
        if not self.cfg.sync.durable or self.state is None:
            return None
        from kilorl.algos import keys

        latest = self.store.latest_version(keys.POLICY)
        if latest is None or latest <= self.iteration:
            return None
        self.resumed_versions = latest - self.iteration
        self.iteration = latest
        return latest

    # -- one role process (start-up, and a replacement when a role is moved: kilorl.trainer.migration) --
    def _report(self, replacement: bool) -> dict[str, Any]:
        if self.monitor is None:
            return {}
        spec = self.monitor.spec
        return {"monitor": dataclasses.replace(spec, replacement=True) if replacement else spec}

    def actor_seed(self, index: int, generation: int = 0) -> int:
        """Actor ``index``'s seed; ``generation`` counts the replacements of that actor (fresh episodes)."""
        return self.cfg.train.seed * 10_007 + index * 101 + self.iteration * 7_919 + generation * 1_000_003

    def spawn_actor(self, index: int, seed: int, options: dict[str, Any], replacement: bool = False) -> Any:
        """A new actor process (not yet waited for) with Ray ``options`` (resources, scheduling)."""
        import ray

        from kilorl.roles.remote import ActorProcess

        # No task retries inside Ray: the loop re-collects a lost rollout itself, and counts it.
        actor_cls = ray.remote(max_restarts=ACTOR_MAX_RESTARTS, max_task_retries=0,
                               concurrency_groups=ROLE_CONCURRENCY)(ActorProcess)
        return actor_cls.options(**options).remote(self.cfg, self.store, index, seed=seed,
                                                   replay_prefix=self.replay_prefix or None, **self._report(replacement))

    def spawn_learner(self, rank: int, state: dict[str, Any] | None, options: dict[str, Any],
                      replacement: bool = False, weights_version: int | None = None,
                      policies: list[str] | None = None) -> Any:
        """A new learner process, built by its ``start()``; ``state`` is a checkpoint's learner state,
        ``weights_version`` a durable version whose weights replace the checkpoint's; ``policies``:
        the policies it trains in a run of several (``kilorl.roles.policy_learners``)."""
        import ray

        from kilorl.roles.remote import LearnerProcess

        several = {} if policies is None else {"policies": policies}
        if not self.learners_per_policy:  # several policies run on the on_policy path only: no replay tables
            several["replay_prefix"] = self.replay_prefix or None
        return ray.remote(concurrency_groups=ROLE_CONCURRENCY)(LearnerProcess).options(**options).remote(
            self.cfg, self.store, rank, self.cfg.parallelism.learner, self.backend, state=state,
            weights_version=weights_version, **several, **self._report(replacement))

    @property
    def learners_per_policy(self) -> bool:
        """Several policies: ``learners`` is one group of ``parallelism.learner`` ranks per policy, in
        ``multi_agent.policies`` order, each rank taking its policy's part of its actors' rollouts."""
        return bool(learner_roles(self.cfg))

    def rank_zeros(self) -> list[Any]:
        """Rank 0 of each learner group: the one of a single policy, or each policy's."""
        return self.learners[::self.cfg.parallelism.learner] if self.learners_per_policy else self.learners[:1]

    def checkpoint_files(self) -> Any:
        """The learners' checkpoint files: rank 0's, or every policy's part (several policies)."""
        import ray

        parts = ray.get([h.checkpoint_files.remote() for h in self.rank_zeros()])
        if len(parts) == 1:
            return parts[0]
        from kilorl.core import CheckpointFiles

        files = {name: data for part in parts for name, data in part.files.items()}
        meta = {key: {k: v for part in parts for k, v in part.meta[key].items()} for key in parts[0].meta}
        return CheckpointFiles(files, meta)

    def _store_fleet(self) -> StoreFleet:
        from kilorl.trainer.store_fleet import StoreFleet

        st = self.cfg.store
        if st.address:
            return StoreFleet.external(st.address, st.token)
        # Not waited for here: the roles start alongside the workers (see _start's waits).
        return StoreFleet.start(st.shm_size, st.keep_versions, l2_dir=self.l2_dir, wait=False,
                                extra=self._store_leaks(), reconnect_timeout_s=st.reconnect_timeout_s,
                                node_options=self.placement.store_worker_options() if self.placement else None)

    def _store_leaks(self) -> dict[int, list[str]]:
        return store_leaks(self.cfg)

    @staticmethod
    def _wait_all(waits: dict[str, Any]) -> None:
        """Wait for every role; the first failure becomes a StartupError naming the role."""
        import ray

        names = {ref: name for name, ref in waits.items()}
        pending = list(names)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                raise StartupError(f"{names[done[0]]} failed to start: {_cause(err)}") from err

    def close(self) -> None:
        """Kill every role this session started; stop Ray if this session started it."""
        import ray

        if ray.is_initialized():
            for handle in [*self.actors, *self.learners]:
                try:
                    ray.kill(handle)
                except Exception:  # noqa: BLE001 - already dead is fine: the goal is "not running"
                    pass
            if self.placement is not None:
                self.placement.remove()
        if self.fleet is not None:  # a local worker may have started before Ray (or Ray failed to start)
            self.fleet.close()
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self.actors, self.learners, self.store, self.fleet, self.placement = [], [], None, None, None
        self._started_ray = False


def needs_local_store(cfg: Config, cluster: Cluster) -> bool:
    """Whether a run starts this machine's store worker itself: Ray started here, no given store."""
    return cluster.kind == "local" and not cfg.store.address


def start_local_store(cfg: Config, l2_dir: str | None) -> StoreFleet:
    """This machine's store worker, started now (it serves once Ray names the driver's node)."""
    from kilorl.trainer.store_fleet import StoreFleet

    return StoreFleet.start_local(cfg.store.shm_size, cfg.store.keep_versions, l2_dir=l2_dir, extra=store_leaks(cfg),
                                  reconnect_timeout_s=cfg.store.reconnect_timeout_s)


def store_leaks(cfg: Config) -> dict[int, list[str]]:
    """``monitor.inject_leaks`` entries of role ``store``, as worker options per store rank."""
    return {leak.rank: ["--inject-leak", str(leak.bytes_per_s), "--inject-leak-after", str(leak.start_after_s)]
            for leak in cfg.monitor.inject_leaks if leak.role == "store"}


def parameter_store(cfg: Config, fleet: StoreFleet, shard_nodes: list[str] | None = None) -> Any:
    """The roles' parameter store: ``parallelism.parameter_server`` shards on the fleet's workers.

    Readers use their own node's worker. The workers form one mesh (``--head`` / ``--join``),
    whose versions are one history per name. ``shard_nodes`` (the plan's node of each shard,
    ``RolePlacement.shard_nodes``): shard ``k`` is written to that node's worker, so a
    version's shards live on several nodes; a version reaches another node the first time a
    reader there asks, each shard pulled once through the mesh, so each node holds one copy
    its actors read locally. Without it, or with one worker (one node, a given ``--store``
    worker), every shard is written to the publisher's own worker.
    """
    from kilorl.params.store_backed import StoreParameterStore
    from kilorl.roles.store_node import PinnedConnector
    from kilorl.store import WriteMode

    mode = WriteMode.WRITE_THROUGH_L2 if cfg.sync.durable else None
    c = fleet.connector
    several_workers = len(set(c.nodes) | set(c.files)) > 1  # one worker: every home is the publisher's own
    homes = [PinnedConnector(c, n) for n in shard_nodes] if shard_nodes and several_workers else []
    return StoreParameterStore(c, cfg.parallelism.parameter_server, write_mode=mode,
                               reconnect_timeout_s=cfg.store.reconnect_timeout_s, shard_homes=homes)


def _cause(err: BaseException) -> str:
    """The innermost error message of a Ray failure (the user's exception, not Ray's wrapper)."""
    cause = getattr(err, "cause", None) or err.__cause__
    if isinstance(cause, BaseException) and cause is not err:
        return f"{type(cause).__name__}: {cause}"
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__
