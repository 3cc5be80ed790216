"""Evaluate a checkpoint: run whole episodes with the saved policy and normalizers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kilorl.config import config_from_dict
from kilorl.trainer.checkpoint import load_checkpoint, resolve_checkpoint, select_checkpoint


@dataclass
class EvalResult:
    episode_return_mean: float
    episode_return_std: float
    episodes: int
    returns: list[float]
    checkpoint: str
    env_steps: int


def evaluate(path: str | Path, episodes: int = 20, deterministic: bool = True, seed: int = 1_000_000,
             checkpoint: str | None = None, env_kwargs: dict[str, Any] | None = None) -> EvalResult:
    """Mean/std return of ``episodes`` full episodes, each from its own seed.

    ``path``: a checkpoint, or a run directory; of a run, ``checkpoint`` (``best``, ``latest``,
    ``step_N``) or else its best checkpoint when it kept one, its newest otherwise.
    ``env_kwargs`` override the run's ``env.kwargs``: a policy trained in simulation played on
    a perturbed copy (docs/recorded_data.md)."""
    from kilorl.roles.evaluation import EpisodeRunner

    ckpt = select_checkpoint(Path(path), checkpoint) if checkpoint else resolve_checkpoint(Path(path))
    state, meta = load_checkpoint(ckpt)
    config = meta["config"]
    if env_kwargs:
        config = {**config, "env": {**config["env"], "kwargs": {**config["env"].get("kwargs", {}), **env_kwargs}}}
    runner = EpisodeRunner(config_from_dict(config))
    try:
        returns = runner.returns(state, episodes, seed, deterministic)
    finally:
        runner.close()
    return EvalResult(float(np.mean(returns)), float(np.std(returns)), episodes, returns, str(ckpt), int(meta["env_steps"]))
