"""``replay_buffer.offline``: a recorded dataset loaded at the learner's start as transition
rows for its algorithm (``LearnerContext.offline``), checked against the run's env first.
Each row also carries its return-to-go (``RETURN_TO_GO``: discounted by ``algo.gamma`` within
its episode, nothing bootstrapped past a truncation; ``kilorl.datasets.returns``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from kilorl.algos.api import OfflineRows
from kilorl.datasets import DatasetError, read_dataset, returns_to_go

if TYPE_CHECKING:
    from kilorl.config import Config


RETURN_TO_GO = "return_to_go"
"""Column of recorded rows: the discounted return from that step to its episode's last recorded step."""


def offline_rows(cfg: Config, obs_space: gym.Space, action_space: gym.Space) -> OfflineRows | None:
    """The section's dataset as ``(obs, action, reward, next_obs, terminated, return_to_go)`` rows; None
    without one. A dataset whose spaces differ from the env's is refused, naming both."""
    section = cfg.replay_buffer.offline if cfg.replay_buffer is not None else None
    if section is None:
        return None
    episodes, meta = read_dataset(section.path)
    for field, env_space in (("observation_space", obs_space), ("action_space", action_space)):
        if meta[field] != env_space:
            raise DatasetError(f"replay_buffer.offline.path={section.path}: the dataset's {field} {meta[field]} "
                               f"differs from env {cfg.env.id}'s {env_space}")
    if not episodes:
        raise DatasetError(f"replay_buffer.offline.path={section.path}: the dataset holds no episode")
    gamma = float(getattr(cfg.algo, "gamma", 1.0))
    columns = {
        "obs": np.concatenate([e.observations[:-1] for e in episodes]),
        "action": np.concatenate([e.actions for e in episodes]),
        "reward": np.concatenate([e.rewards for e in episodes]),
        "next_obs": np.concatenate([e.observations[1:] for e in episodes]),
        "terminated": np.concatenate([e.terminations for e in episodes]).astype(bool),
        RETURN_TO_GO: np.concatenate([returns_to_go(e.rewards, gamma) for e in episodes]).astype(np.float32),
    }
    return OfflineRows(columns, section.ratio, source=str(section.path))
