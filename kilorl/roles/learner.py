"""The learner role: any registered algorithm's update, publishing each new version.

Generic: it looks the algorithm up by ``algo.name``, gives it a ``GradientComm`` for
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
from kilorl.algos.api import AlgorithmLearner, LearnerContext
from kilorl.comm import init_process_group
from kilorl.core import CheckpointFiles, GradientComm, Learner, ParameterStore, Rollout
from kilorl.envs import env_spaces as column_spaces
from kilorl.roles.checkpoint_format import checkpoint_files
from kilorl.roles.evaluation import EpisodeRunner
from kilorl.roles.grad_comm import make_grad_comm
from kilorl.roles.heap import retain_freed_memory
from kilorl.roles.learner_feeds import make_feed, merge_rollouts, stale
from kilorl.roles.offline_data import offline_rows

__all__ = ["LearnerRole", "build_algorithm", "env_spaces", "merge_rollouts", "stale"]

if TYPE_CHECKING:
    from kilorl.config import Config


def env_spaces(cfg: Config) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of the run's environment (of one agent column for a PettingZoo one)."""
    critic_state = cfg.multi_agent is not None and cfg.multi_agent.centralized_critic == "state"
    return column_spaces(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps, critic_state)


def learner_context(cfg: Config, obs_space: gym.Space, action_space: gym.Space, grad_comm: GradientComm,
                    rank: int = 0, world: int = 1, replay_storage: Any = None,
                    offline_storage: Any = None) -> LearnerContext:
    """The small context an algorithm's learner is built with (not the whole run config)."""
    build = get_algorithm(cfg.algo.name).load("model")
    par, train = cfg.parallelism, cfg.train
    return LearnerContext(
        obs_space=obs_space, action_space=action_space, grad_comm=grad_comm,
        build_model=lambda: build(obs_space, action_space, cfg.model), device=train.device, rank=rank,
        world_size=world, envs_per_env_runner=par.envs_per_actor, num_env_runners=par.actor,
        total_env_steps=train.total_env_steps, seed=train.seed, mixed_precision=train.mixed_precision,
        gradient_accumulation_steps=train.gradient_accumulation_steps, replay_storage=replay_storage,
        offline=offline_rows(cfg, obs_space, action_space), offline_storage=offline_storage,
    )


def build_algorithm(cfg: Config, grad_comm: GradientComm, spaces: tuple[gym.Space, gym.Space] | None = None,
                    rank: int = 0, world: int = 1, store: Any = None,
                    replay_prefix: str | None = None) -> AlgorithmLearner:
    """The run's algorithm learner: its class from the registry, its section, its context.
    ``store``: the parameter store, whose workers also hold a ``replay_buffer`` table, named
    under ``replay_prefix`` (``store_replay.table_prefix``; None: a fresh random one)."""
    obs_space, action_space = spaces or env_spaces(cfg)
    ctx = learner_context(cfg, obs_space, action_space, grad_comm, rank, world,
                          replay_storage(cfg, store, rank, replay_prefix),
                          offline_storage(cfg, store, rank, replay_prefix))
    return get_algorithm(cfg.algo.name).load("learner")(cfg.algo, ctx)


def replay_storage(cfg: Config, store: Any, rank: int = 0, prefix: str | None = None) -> Any:
    """Where a replay table's rows live: the store workers with a ``replay_buffer`` section
    (``kilorl.roles.store_replay``), else None (the algorithm's own, in this process)."""
    section = cfg.replay_buffer
    if section is None or section.backend != "store":
        return None
    connect = getattr(store, "connect", None)
    if connect is None:
        raise ValueError("replay_buffer.backend=store: this learner's parameter store has no store workers "
                         f"({type(store).__name__}); use backend: learner")
    from kilorl.roles.store_replay import actors_insert, learner_scope, store_replay_factory, table_prefix

    return store_replay_factory(connect, section, learner_scope(prefix or table_prefix(None), rank),
                                batch_size=getattr(cfg.algo, "batch_size", 1), external_inserts=actors_insert(cfg),
                                learning_starts=getattr(cfg.algo, "learning_starts", 0))


def offline_storage(cfg: Config, store: Any, rank: int = 0, prefix: str | None = None) -> Any:
    """Where the recorded rows of ``replay_buffer.offline`` live: an immutable table on the
    store workers when the section's table is there (``kilorl.roles.store_offline``), else None
    (the algorithm's own, in this process)."""
    section = cfg.replay_buffer
    if section is None or section.backend != "store" or section.offline is None:
        return None
    connect = getattr(store, "connect", None)
    if connect is None:
        return None  # replay_storage already refused this store
    from kilorl.roles.store_offline import offline_scope, store_offline_factory
    from kilorl.roles.store_replay import table_prefix

    return store_offline_factory(connect, section, offline_scope(prefix or table_prefix(None), rank))


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
        grad_comm: GradientComm | None = None,
        weights_version: int | None = None,
        replay_prefix: str | None = None,
        policy: str | None = None,
        trains: bool = True,
    ) -> None:
        """``weights_version``: after ``state``, take the model and normalizers of this
        published version from ``store`` (a resumed durable run, ``sync.durable``);
        ``replay_prefix``: the run's replay tables' names (``store_replay.table_prefix``).
        ``policy``: one of several policies (``multi_agent.policies``), published under its own
        name; ``trains`` false: not in ``policies_to_train``, its weights stay as they are."""
        torch.set_num_threads(cfg.train.torch_threads)
        retain_freed_memory(cfg.train.retain_freed_memory_mb)
        torch.manual_seed(cfg.train.seed)
        self.name, self.trains = keys.published_name(policy), trains
        if world > 1:
            if master is None:
                raise ValueError("several learners need a master address for the process group")
            init_process_group(backend, rank, world, *master)
        self.cfg, self.rank, self.world, self.store = cfg, rank, world, store
        self.max_staleness = cfg.sync.staleness(cfg.train.pipeline_depth)
        obs_space, action_space = env_spaces(cfg)  # probed here, in parallel with the actors' start
        self.grad_comm = grad_comm or make_grad_comm(cfg, world)
        self.algorithm = build_algorithm(cfg, self.grad_comm, (obs_space, action_space), rank, world, store,
                                         replay_prefix)
        self.feed = make_feed(get_algorithm(cfg.algo.name).data_path, self.algorithm, self.grad_comm, world,
                              self.max_staleness)
        if state is not None:
            self.algorithm.load_state(state)
        if weights_version is not None:
            _, tensors = store.fetch(self.name, weights_version)
            self.algorithm.load_weights({k: t.numpy() for k, t in tensors.items()})
        self._warm_up: threading.Thread | None = None
        self._episodes: EpisodeRunner | None = None

    def publish(self, version: int) -> None:
        if self.rank == 0:
            self.store.publish(self.name, version, self.algorithm.weights())
        if self._warm_up is None:
            # Actors can start the first rollout now; the algorithm's slow one-off set-up
            # (the optimizer's first-call imports) runs meanwhile, off the start-up path.
            self._warm_up = threading.Thread(target=self.algorithm.warm_up, name="kilorl-warm-up", daemon=True)
            self._warm_up.start()

    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        """Hand the rollouts to the data path's feed (``kilorl.roles.learner_feeds``), which
        trains the algorithm on its source, then publish ``version`` (the unchanged weights
        again when the feed skipped the step)."""
        if self._warm_up is not None:
            self._warm_up.join()
        t0 = time.perf_counter()
        stats = self.feed.train(version, env_steps_total, list(rollouts)) if self.trains else {}
        t1 = time.perf_counter()
        self.publish(version)
        stats.update(self.grad_comm.stats(), learner_update_s=t1 - t0, publish_s=time.perf_counter() - t1)
        per_shard = getattr(self.store, "publish_stats", None)  # the store-backed parameter store's
        if per_shard is not None and self.rank == 0:
            stats.update(per_shard())  # ps_shard<k>_bytes / ps_shard<k>_publish_s in the metric row
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
        return self._episodes.returns(self.algorithm.policy_state(), episodes, seed, deterministic)

    def weights_digest(self) -> float:
        """A cheap fingerprint of the weights (tests check that ranks agree)."""
        return float(sum(np.asarray(v, np.float64).sum() for k, v in self.algorithm.weights().items()
                         if k.startswith(keys.MODEL)))
