"""The learner role: a PPO learner that publishes each new version to the parameter store."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from kilorl.algos.ppo import PPOLearner, merge_batches
from kilorl.comm import GradientAllReducer, init_process_group
from kilorl.core import Learner, ParameterStore
from kilorl.roles.actor import POLICY


class LearnerRole(Learner):
    """Rank ``rank`` of ``world`` learners. Rank 0 publishes; all ranks stay identical."""

    def __init__(
        self,
        cfg: Any,
        store: ParameterStore,
        obs_space: gym.Space,
        action_space: gym.Space,
        rank: int = 0,
        world: int = 1,
        backend: str = "gloo",
        master: tuple[str, int] | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        torch.set_num_threads(cfg.train.torch_threads)
        torch.manual_seed(cfg.train.seed)
        if world > 1:
            if master is None:
                raise ValueError("several learners need a master address for the process group")
            init_process_group(backend, rank, world, *master)
        self.rank, self.world, self.store = rank, world, store
        self.learner = PPOLearner(cfg, obs_space, action_space, GradientAllReducer(world))
        if state is not None:
            self.learner.load_state(state)

    def publish(self, version: int) -> None:
        if self.rank == 0:
            self.store.publish(POLICY, version, self.learner.weights())

    def step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        return self.learner.update(batch, self.learner.env_steps + batch["rewards"].size)

    def update(self, version: int, env_steps_total: int, *batches: dict[str, np.ndarray]) -> dict[str, float]:
        """Train on the actors' batches, then publish the result as ``version``."""
        t0 = time.perf_counter()
        stats = self.learner.update(merge_batches(list(batches)), env_steps_total)
        t1 = time.perf_counter()
        self.publish(version)
        stats.update(learner_update_s=t1 - t0, publish_s=time.perf_counter() - t1)
        return stats

    def state(self) -> dict[str, Any]:
        return self.learner.state()

    def weights_digest(self) -> float:
        """A cheap fingerprint of the weights (tests check that ranks agree)."""
        return float(sum(p.double().sum() for p in self.learner.model.parameters()))
