"""The learner role: any registered algorithm's update, publishing each new version.

Generic: it looks the algorithm up by ``algo.name``, gives it a ``GradientSync`` for
gradient communication, merges the actors' rollouts along the env axis (``[T, N]``
stays ``[T, N_total]``) and publishes what the algorithm's ``weights()`` returns.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.algos import keys
from kilorl.comm import init_process_group
from kilorl.core import CheckpointFiles, GradientSync, Learner, ParameterStore, Rollout
from kilorl.envs import make_env
from kilorl.roles.checkpoint_format import checkpoint_files
from kilorl.roles.evaluation import EpisodeRunner
from kilorl.roles.grad_sync import make_grad_sync
from kilorl.roles.heap import retain_freed_memory

if TYPE_CHECKING:
    from kilorl.config import Config


def merge_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Concatenate actors' rollouts along the env axis: ``steps`` on axis 1, ``last`` on axis 0."""
    if len(rollouts) == 1:
        return rollouts[0]
    first = rollouts[0]
    return Rollout(
        steps={k: np.concatenate([r.steps[k] for r in rollouts], axis=1) for k in first.steps},
        last={k: np.concatenate([r.last[k] for r in rollouts], axis=0) for k in first.last},
        moments={k: [m for r in rollouts for m in r.moments.get(k, [])] for k in first.moments},
        version=min((r.version for r in rollouts if r.version is not None), default=None),
    )


def stale(rollouts: list[Rollout], trained_version: int, max_staleness: int) -> list[bool]:
    """Which rollouts were produced more than ``max_staleness`` versions before ``trained_version``."""
    return [r.version is not None and trained_version - r.version > max_staleness for r in rollouts]


def env_spaces(cfg: Config) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of the run's environment (built once, then closed)."""
    probe = make_env(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps)
    try:
        return probe.observation_space, probe.action_space
    finally:
        probe.close()


class LearnerRole(Learner):
    """Rank ``rank`` of ``world`` learners. Rank 0 publishes; all ranks stay identical."""

    def __init__(
        self,
        cfg: Config,
        store: ParameterStore,
        rank: int = 0,
        world: int = 1,
        backend: str = "gloo",
        master: tuple[str, int] | None = None,
        state: dict[str, Any] | None = None,
        grad_sync: GradientSync | None = None,
        weights_version: int | None = None,
    ) -> None:
        """``weights_version``: after ``state``, take the model and normalizers of this
        published version from ``store`` (a resumed durable run, ``sync.durable``)."""
        torch.set_num_threads(cfg.train.torch_threads)
        retain_freed_memory(cfg.train.retain_freed_memory_mb)
        torch.manual_seed(cfg.train.seed)
        if world > 1:
            if master is None:
                raise ValueError("several learners need a master address for the process group")
            init_process_group(backend, rank, world, *master)
        self.cfg, self.rank, self.world, self.store = cfg, rank, world, store
        self.max_staleness = cfg.sync.staleness(cfg.train.pipeline_depth)
        obs_space, action_space = env_spaces(cfg)  # probed here, in parallel with the actors' start
        self.grad_sync = grad_sync or make_grad_sync(cfg, world)
        self.algorithm = get_algorithm(cfg.algo.name).load("learner")(cfg, obs_space, action_space, self.grad_sync)
        if state is not None:
            self.algorithm.load_state(state)
        if weights_version is not None:
            _, tensors = store.fetch(keys.POLICY, weights_version)
            self.algorithm.load_weights({k: t.numpy() for k, t in tensors.items()})
        self._warm_up: threading.Thread | None = None
        self._episodes: EpisodeRunner | None = None

    def publish(self, version: int) -> None:
        if self.rank == 0:
            self.store.publish(keys.POLICY, version, self.algorithm.weights())
        if self._warm_up is None:
            # Actors can start the first rollout now; the algorithm's slow one-off set-up
            # (the optimizer's first-call imports) runs meanwhile, off the start-up path.
            self._warm_up = threading.Thread(target=self.algorithm.warm_up, name="kilorl-warm-up", daemon=True)
            self._warm_up.start()

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        """Train on the rollouts that are fresh enough and publish ``version``.

        The weights being trained are ``version - 1``; a rollout older than that by more
        than ``max_staleness`` is dropped (counted in ``stale_rollouts``). If any rank is
        left with nothing, every rank skips the step together (their all-reduces must match)
        and ``version`` republishes the unchanged weights.
        """
        if self._warm_up is not None:
            self._warm_up.join()
        t0 = time.perf_counter()
        old = stale(list(rollouts), version - 1, self.max_staleness)
        fresh = [r for r, s in zip(rollouts, old) if not s]
        empty = self.grad_sync.average_scalars([float(not fresh)])[0] if self.world > 1 else float(not fresh)
        stats = {} if empty > 0 else self.algorithm.update(merge_rollouts(fresh), env_steps_total)
        stats.update(stale_rollouts=float(sum(old)), skipped_update=float(empty > 0))
        t1 = time.perf_counter()
        self.publish(version)
        stats.update(self.grad_sync.stats(), learner_update_s=t1 - t0, publish_s=time.perf_counter() - t1)
        return stats

    def state(self) -> dict[str, Any]:
        return self.algorithm.state()

    def checkpoint_files(self) -> CheckpointFiles:
        """``state()`` as the checkpoint's bytes, made here where torch is (the driver has none)."""
        return checkpoint_files(self.state())

    def evaluate(self, episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        """Episodes with the current policy on an environment of the learner's own, built at
        the first call; the training state (weights, RNG) is left as it was."""
        if self._episodes is None:
            self._episodes = EpisodeRunner(self.cfg)
        return self._episodes.returns(self.algorithm.state(), episodes, seed, deterministic)

    def weights_digest(self) -> float:
        """A cheap fingerprint of the weights (tests check that ranks agree)."""
        return float(sum(np.asarray(v, np.float64).sum() for k, v in self.algorithm.weights().items()
                         if k.startswith(keys.MODEL)))
