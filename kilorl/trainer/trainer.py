"""The driver: starts the roles on Ray, streams rollouts to learners, reports, checkpoints."""

from __future__ import annotations

import socket
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from kilorl.config import Config, apply_overrides, config_from_dict, dump_config
from kilorl.envs import make_env
from kilorl.trainer.checkpoint import load_checkpoint, save_checkpoint
from kilorl.trainer.cluster import Cluster
from kilorl.trainer.metrics import MetricsWriter


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    episode_return_mean: float | None
    checkpoint: Path
    wall_time: float
    startup_s: float


def default_run_dir(cfg: Config) -> Path:
    env = cfg.env.id.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{env}-{cfg.algo.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Trainer:
    """Runs one training job described by a Config.

    Iteration ``i`` trains on rollouts collected with parameters at least version
    ``i - pipeline_depth`` and publishes version ``i + 1``; with depth 0 actors and
    learner alternate, with depth >= 1 actors collect the next rollout while the learner
    trains on the previous one.
    """

    def __init__(self, cfg: Config, run_dir: str | Path | None = None, cluster: Cluster | None = None) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir else default_run_dir(cfg)
        self.cluster = cluster or Cluster()
        self._resume_from: Path | None = None

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

    # ------------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        import ray

        from kilorl.comm import resolve_backend
        from kilorl.roles.actor import RolloutWorker
        from kilorl.roles.learner import LearnerRole
        from kilorl.roles.parameter_store import RayParameterStore

        cfg, par = self.cfg, self.cfg.parallelism
        if par.actor % par.learner:
            raise ValueError(f"parallelism.actor={par.actor} must be a multiple of parallelism.learner={par.learner}")
        t_start = time.time()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(dump_config(cfg))

        state, meta = (None, {})
        if self._resume_from is not None:
            state, meta = load_checkpoint(self._resume_from)
        env_steps = int(meta.get("env_steps", 0))
        iteration = int(meta.get("iteration", 0))
        wall_offset = float(meta.get("wall_time", 0.0))
        returns: deque[float] = deque(meta.get("recent_returns", []), maxlen=cfg.logging.return_window)
        episodes = int(meta.get("episodes", 0))

        started_ray = self.cluster.connect(num_cpus_needed=par.actor + par.learner)
        probe = make_env(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps)
        obs_space, act_space = probe.observation_space, probe.action_space
        probe.close()
        store = RayParameterStore.create(par.parameter_server)
        backend = resolve_backend(self.cluster.communication_backend, "cuda" if cfg.train.device == "cuda" else "cpu")
        master = ("127.0.0.1", _free_port()) if par.learner > 1 else None
        learner_cls = ray.remote(num_cpus=1, num_gpus=1 if cfg.train.device == "cuda" else 0)(LearnerRole)
        learners = [
            learner_cls.remote(cfg, store, obs_space, act_space, r, par.learner, backend, master, state)
            for r in range(par.learner)
        ]
        actor_cls = ray.remote(num_cpus=1)(RolloutWorker)
        # Fresh seeds after a resume, so a continued run does not replay the same episodes.
        actors = [
            actor_cls.remote(cfg, store, i, seed=cfg.train.seed * 10_007 + i * 101 + iteration * 7_919)
            for i in range(par.actor)
        ]
        # Start-up ends when every role process is up and version `iteration` is published,
        # so process spawn and imports are not counted as training time.
        ray.get([learners[0].publish.remote(iteration), *[a.ready.remote() for a in actors]])
        startup_s = time.time() - t_start
        metrics = MetricsWriter(self.run_dir, cfg.train.total_env_steps, cfg.logging.tensorboard, cfg.logging.progress)

        batch_size = cfg.batch_size
        depth = par.pipeline_depth
        pending: deque[tuple[list[Any], list[Any]]] = deque()
        next_collect = iteration
        first_version = iteration

        def submit_collect() -> None:
            nonlocal next_collect
            min_version = max(first_version, next_collect - depth)
            refs = [a.collect.options(num_returns=2).remote(min_version) for a in actors]
            pending.append(([r[0] for r in refs], [r[1] for r in refs]))
            next_collect += 1

        while len(pending) <= depth and env_steps + len(pending) * batch_size < cfg.train.total_env_steps:
            submit_collect()
        last_report_t, last_report_steps = time.time(), env_steps
        loop_t0 = time.time()
        ckpt_every = cfg.checkpoint.every_env_steps
        next_ckpt = (env_steps // ckpt_every + 1) * ckpt_every if ckpt_every else None
        stats: dict[str, float] = {}
        config_json = cfg.model_dump(mode="json")
        ckpt_path: Path | None = None
        ckpt_steps = -1

        def checkpoint() -> Path:
            """Save the learner's state with the driver's counters (only when due: not per iteration)."""
            meta_now = {
                "env_steps": env_steps, "iteration": iteration, "version": iteration, "episodes": episodes,
                "wall_time": wall_offset + time.time() - t_start, "recent_returns": list(returns), "config": config_json,
            }
            return save_checkpoint(self.run_dir, ray.get(learners[0].state.remote()), meta_now, cfg.checkpoint.keep)

        try:
            while pending:
                batch_refs, info_refs = pending.popleft()
                steps_after = env_steps + batch_size
                updates = [
                    learners[r].update.remote(iteration + 1, steps_after, *batch_refs[r :: par.learner])
                    for r in range(par.learner)
                ]
                if steps_after + len(pending) * batch_size < cfg.train.total_env_steps:
                    submit_collect()
                infos = ray.get(info_refs)
                stats = ray.get(updates)[0]
                env_steps, iteration = steps_after, iteration + 1
                for info in infos:
                    returns.extend(info["episode_returns"])
                    episodes += len(info["episode_returns"])
                now = time.time()
                ret_mean = float(np.mean(returns)) if returns else None
                solved = cfg.train.stop_return is not None and ret_mean is not None and len(returns) >= cfg.logging.return_window and ret_mean >= cfg.train.stop_return
                last = not pending or solved
                if now - last_report_t >= cfg.logging.report_every_s or last:
                    row = {
                        "env_steps": env_steps, "wall_time": wall_offset + now - t_start,
                        "train_time": now - loop_t0, "startup_s": startup_s,
                        "sps": (env_steps - last_report_steps) / max(now - last_report_t, 1e-9),
                        "iteration": iteration, "episodes": episodes,
                        "collect_s": float(np.mean([i["collect_s"] for i in infos])),
                        "actor_wait_s": float(np.mean([i["wait_s"] for i in infos])),
                        "policy_lag": float(np.mean([iteration - 1 - i["version"] for i in infos])),
                        **stats,
                    }
                    if ret_mean is not None:
                        row["episode_return_mean"] = ret_mean
                    metrics.report(row)
                    last_report_t, last_report_steps = now, env_steps
                if next_ckpt is not None and env_steps >= next_ckpt:
                    ckpt_path, ckpt_steps = checkpoint(), env_steps
                    next_ckpt += ckpt_every
                if solved:
                    break
            if ckpt_steps != env_steps:  # the final state, unless it was just saved
                ckpt_path = checkpoint()
        finally:
            metrics.close()
            for handle in [*actors, *learners, *store.shards]:
                ray.kill(handle)
            if started_ray:
                ray.shutdown()
        ret_mean = float(np.mean(returns)) if returns else None
        return TrainResult(self.run_dir, env_steps, ret_mean, ckpt_path, wall_offset + time.time() - t_start, startup_s)

