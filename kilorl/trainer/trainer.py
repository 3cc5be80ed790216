"""The driver: one run = start the roles, feed the algorithm's data path, report, checkpoint.

Each concern is its own part: ``RoleSession`` (start-up/teardown), the algorithm's data path
(``kilorl.trainer.data_path``: ``on_policy``, ``replay``), ``Reporter`` (metrics),
``Checkpointer`` (cadence and files). The trainer holds no algorithm-specific code: the
algorithm is whatever ``algo.name`` registered, and its spec names its data path.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kilorl.algos import get as get_algorithm
from kilorl.config import Config, apply_overrides, config_from_dict, dump_config
from kilorl.trainer import early_stop
from kilorl.trainer.cluster import Cluster
from kilorl.trainer.loop_errors import LEARNER_MAX_RESTORES, LearnerLost
from kilorl.trainer.waiting import RunStopped

if TYPE_CHECKING:
    from collections.abc import Callable

    from kilorl.trainer.checkpoint import Checkpointer
    from kilorl.trainer.data_path import DataPath
    from kilorl.trainer.evaluation import EvaluationSchedule
    from kilorl.trainer.migration import Migrator
    from kilorl.trainer.reporting import Reporter
    from kilorl.trainer.session import RoleSession


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    episode_return_mean: float | None
    checkpoint: Path | None
    """The run's result: its best evaluated policy with ``evaluation.keep_best``, else its final state."""
    wall_time: float
    startup_s: float
    stopped: str | None = None
    """Why the run stopped before its env-step budget (a role that could not be moved), else None."""
    eval_return_mean: float | None = None
    """The last evaluation's mean return (``evaluation``), None when the run made none."""
    best_eval_return_mean: float | None = None
    """The best evaluation's mean return (the ``best`` checkpoint's, with ``keep_best``)."""


def default_run_dir(cfg: Config) -> Path:
    env = cfg.env.id.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{env}-{cfg.algo.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def config_warnings(cfg: Config) -> list[str]:
    """Settings that are accepted but do not (yet) do what they say; printed at start-up."""
    out = []
    if cfg.train.overlap_compute_comm and cfg.parallelism.learner == 1:
        out.append("train.overlap_compute_comm=true has no effect with one learner: there is no gradient "
                   "communication to overlap")
    if cfg.compression.method != "none" and cfg.parallelism.learner == 1:
        out.append(f"compression.method={cfg.compression.method} has no effect with one learner: gradients "
                   "are not communicated")
    if cfg.train.pipeline_depth >= cfg.iterations > 0:
        out.append(f"train.pipeline_depth={cfg.train.pipeline_depth} is not below the run's {cfg.iterations} "
                   f"iteration(s): every rollout may be collected before the first update")
    return out


def _process_age() -> float:
    """Seconds since this process started (interpreter and imports included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


class Trainer:
    """Runs one training job described by a Config (see ``kilorl.trainer.data_path`` for the schedule)."""

    def __init__(self, cfg: Config, run_dir: str | Path | None = None, cluster: Cluster | None = None) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir else default_run_dir(cfg)
        self.cluster = cluster or Cluster()
        self._resume_from: Path | None = None
        from kilorl.trainer.data_path import DATA_PATHS

        self.data_path = get_algorithm(cfg.algo.name).data_path
        if self.data_path not in DATA_PATHS:
            raise NotImplementedError(f"algo.name={cfg.algo.name!r} needs the {self.data_path!r} data path; "
                                      f"this trainer has: {', '.join(sorted(DATA_PATHS))}")
        par = cfg.parallelism
        if self.data_path == "on_policy" and par.actor % par.learner:
            raise ValueError(f"parallelism.actor={par.actor} must be a multiple of parallelism.learner={par.learner}")

    @classmethod
    def resume(cls, run_dir: str | Path, cluster: Cluster | None = None, overrides: list[str] | None = None) -> Trainer:
        """Continue a run from its newest checkpoint (env steps, optimizer, RNG, normalizers).

        ``overrides`` are ``section.field=value`` strings, e.g. a larger ``train.total_env_steps``.
        """
        import yaml

        run_dir = Path(run_dir)
        data = apply_overrides(yaml.safe_load((run_dir / "config.yaml").read_text()), overrides or [])
        trainer = cls(config_from_dict(data), run_dir, cluster)
        trainer._resume_from = run_dir
        return trainer

    def fit(self) -> TrainResult:
        """Train to the end; a learner process that dies makes the run restore its last
        checkpoint and go on, at most ``LEARNER_MAX_RESTORES`` times."""
        from kilorl.trainer.session import needs_local_store, start_local_store

        cfg = self.cfg
        for message in config_warnings(cfg):
            warnings.warn(message, UserWarning, stacklevel=2)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(dump_config(cfg))
        state, meta = self._starting_state()
        durable_replay = cfg.replay_buffer is not None and cfg.replay_buffer.durable
        if self._resume_from is None or not (cfg.sync.durable or durable_replay):
            # versions and replay tables kept by an earlier run in this directory are not this run's
            # to continue from; a resume keeps them (its tables have the same names: store_replay.table_prefix)
            shutil.rmtree(self.l2_dir, ignore_errors=True)
        # This machine's store worker starts before Ray is imported: the worker's own start
        # (0.5 s of CPU) then runs on the core that the import leaves idle, not beside
        # ray.init(), which keeps both cores busy (docs/benchmarks.md, "The store worker
        # starts beside Ray's import").
        fleet = start_local_store(cfg, str(self.l2_dir.resolve())) if needs_local_store(cfg, self.cluster) else None
        try:
            # an early stop (result.stopped, learners or store lost) is the run's last metrics row
            return early_stop.recorded(self.run_dir, cfg.train.total_env_steps,
                                       lambda: self._restoring(state, meta, fleet))
        finally:
            if fleet is not None:  # the session closed it already, unless the run failed before one began
                fleet.close()

    def _starting_state(self) -> tuple[dict | None, dict]:
        """A resume's newest checkpoint (never ``best``: training goes on from where it was);
        a fresh run clears a ``best`` an earlier run left in its directory."""
        from kilorl.trainer.checkpoint import BEST, latest_checkpoint, load_checkpoint

        if self._resume_from is None:
            shutil.rmtree(self.run_dir / "checkpoints" / BEST, ignore_errors=True)
            return None, {}
        last = latest_checkpoint(self._resume_from)
        if last is None:
            raise FileNotFoundError(f"{self._resume_from}: no checkpoint to resume from")
        return load_checkpoint(last)

    def _restoring(self, state: dict | None, meta: dict, fleet: Any) -> TrainResult:
        """Sessions until the run ends: a lost learner restores the last checkpoint, at most
        ``LEARNER_MAX_RESTORES`` times. ``fleet``: the first session's store worker, if started."""
        import ray  # noqa: F401 - imported before the clock starts, as a Ray program imports it first

        from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint

        t_start = time.time()  # start-up (``startup_s``) counts from here: what kiloRL adds to "import ray"
        for attempt in range(LEARNER_MAX_RESTORES + 1):
            try:
                return self._session(state, meta, t_start, fleet if attempt == 0 else None)
            except LearnerLost as err:
                last = latest_checkpoint(self.run_dir)
                if last is None:
                    raise LearnerLost(f"{err}; the run has no checkpoint to restore from "
                                      "(set checkpoint.every_env_steps)") from err
                if attempt == LEARNER_MAX_RESTORES:
                    raise LearnerLost(f"{err}; giving up after {attempt} restores") from err
                warnings.warn(f"{err}: restoring {last} (restore {attempt + 1} of at most {LEARNER_MAX_RESTORES})",
                              UserWarning, stacklevel=2)
                state, meta = load_checkpoint(last)
        raise AssertionError("unreachable")

    @property
    def l2_dir(self) -> Path:
        """Where the run's store workers keep durable (``sync.durable``) parameter versions and
        durable (``replay_buffer.durable``) replay tables."""
        return self.run_dir / "store-l2"

    def _session(self, state: dict | None, meta: dict, t_start: float, fleet: Any = None) -> TrainResult:
        """One set of roles from ``state`` to the end of the run (or a lost learner); ``fleet``:
        a store worker started for it (the session closes it)."""
        from kilorl.trainer.checkpoint import Checkpointer, best_checkpoint
        from kilorl.trainer.data_path import make_data_path
        from kilorl.trainer.evaluation import EvaluationSchedule
        from kilorl.trainer.metrics import MetricsWriter
        from kilorl.trainer.reporting import Reporter
        from kilorl.trainer.session import RoleSession

        cfg = self.cfg
        env_steps, iteration = int(meta.get("env_steps", 0)), int(meta.get("iteration", 0))
        with RoleSession(cfg, self.cluster, state, iteration, l2_dir=str(self.l2_dir.resolve()),
                         run_dir=self.run_dir, fleet=fleet) as roles:
            # a durable resume continues from the newest published version: one batch per version
            iteration, env_steps = roles.iteration, env_steps + roles.resumed_versions * cfg.rollout_steps
            startup_s = time.time() - t_start
            print(f"plan: {json.dumps(roles.plan())}", flush=True)  # what kilorl plan --address prints
            if roles.monitor is not None:
                print(roles.monitor.describe(), flush=True)
            ckpt = Checkpointer(self.run_dir, cfg.checkpoint.every_env_steps, cfg.checkpoint.keep,
                                cfg.model_dump(mode="json"), env_steps)
            metrics = MetricsWriter(self.run_dir, cfg.train.total_env_steps, cfg.logging.tensorboard, cfg.logging.progress)
            startup = {"startup_s": startup_s, "startup_process_s": _process_age(), **roles.times.as_row()}
            reporter = Reporter(cfg, metrics, {**meta, "env_steps": env_steps}, t_start, startup)
            evals = EvaluationSchedule.for_run(cfg.evaluation, env_steps, self.run_dir)
            stopped: list[str] = []
            try:
                loop = make_data_path(self.data_path, cfg, roles, iteration, env_steps)
                env_steps, iteration = self._train(roles, loop, reporter, ckpt, evals, stopped)
            finally:
                metrics.close()
        result = best_checkpoint(self.run_dir) if cfg.evaluation.keep_best else None
        return TrainResult(self.run_dir, env_steps, reporter.return_mean, result or ckpt.last_path, reporter.wall_time(),
                           startup_s, stopped[0] if stopped else None, evals.last_mean, evals.best_mean)

    def _train(self, roles: RoleSession, loop: DataPath, reporter: Reporter, ckpt: Checkpointer,
               evals: EvaluationSchedule, stopped: list[str]) -> tuple[int, int]:
        """The training step: iterate the data path, evaluate and report, move leaking roles,
        checkpoint when due and at the end (a stop on ``stop_return`` saves the policy it measured)."""

        self._progress: tuple[int, int] = (loop.env_steps, loop.iteration)
        """(env steps, iteration) of the last iteration: what a checkpoint records."""

        def save() -> Path:
            files = roles.checkpoint_files()  # bytes: no torch on the driver
            return ckpt.save(files, reporter.checkpoint_meta(*self._progress))

        migrator = self._migrator(roles, save)
        if migrator is not None:  # rounds while the data path waits, too: a fast leak is not left an iteration
            loop.on_wait = lambda updating: migrator.while_waiting(loop, updating)
        try:
            env_steps, iteration = self._iterate(roles, loop, reporter, ckpt, evals, migrator, save)
        except RunStopped as err:  # a migration during a wait could not be carried out
            stopped.append(str(err))
            env_steps = self._progress[0]
        else:
            if migrator is not None and migrator.stop_reason is not None:
                stopped.append(migrator.stop_reason)
            elif ckpt.last_steps != env_steps:  # the final state, unless it was just saved
                save()
        finally:
            if migrator is not None:
                migrator.close()
        return self._progress

    def _iterate(self, roles: RoleSession, loop: DataPath, reporter: Reporter, ckpt: Checkpointer,
                 evals: EvaluationSchedule, migrator: Migrator | None, save: Callable[[], Path]) -> tuple[int, int]:
        """Iterations until the budget is used, the run is solved or a migration stops it."""

        for it in loop:
            self._progress = (it.env_steps, it.iteration)
            env_steps = it.env_steps
            if evals.due(env_steps):
                t_eval = time.perf_counter()
                it.stats.update(evals.run(roles.rank_zeros(), env_steps, roles.learners_per_policy))
                if evals.improved and self.cfg.evaluation.keep_best:
                    files = roles.checkpoint_files()
                    ckpt.save_best(files, {**reporter.checkpoint_meta(env_steps, it.iteration),
                                           "eval_return_mean": evals.last_mean})
                # its own time, so a benchmark can leave evaluations out of the training time
                it.stats["eval_s"] = time.perf_counter() - t_eval
            solved = reporter.observe(it) or evals.reached()
            if ckpt.due(env_steps):
                save()
            if solved or reporter.time_up:
                break
            if roles.monitor is not None:
                roles.monitor.refresh()  # exporters for nodes that joined mid-run
            if migrator is not None and migrator.round(loop):
                break
        return self._progress

    def _migrator(self, roles: RoleSession, save: Callable[[], Path]) -> Migrator | None:
        """The run's migration executor when the monitor runs and migration is on (docs/monitor.md)."""
        if roles.monitor is None or not self.cfg.monitor.migration.enabled:
            return None
        from kilorl.trainer.migration import Migrator

        return Migrator(roles, self.cfg.monitor, self.run_dir, save)
