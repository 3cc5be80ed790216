"""Evaluate a checkpoint: run whole episodes with the saved policy and normalizers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kilorl.config import Config, config_from_dict
from kilorl.roles.checkpoint_format import POLICIES_DIR
from kilorl.trainer.checkpoint import load_checkpoint, resolve_checkpoint, select_checkpoint


@dataclass
class EvalResult:
    episode_return_mean: float
    episode_return_std: float
    episodes: int
    returns: list[float]
    checkpoint: str
    env_steps: int
    policy_return_means: dict[str, float] | None = None
    """A PettingZoo run's: each policy's mean return (the sum over its own agents); None otherwise."""


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
    cfg = config_from_dict(config)
    if cfg.multi_agent is not None:
        return _evaluate_agents(cfg, state, meta, str(ckpt), episodes, deterministic, seed)
    runner = EpisodeRunner(cfg)
    try:
        returns = runner.returns(state, episodes, seed, deterministic)
    finally:
        runner.close()
    return EvalResult(float(np.mean(returns)), float(np.std(returns)), episodes, returns, str(ckpt), int(meta["env_steps"]))


def _evaluate_agents(cfg: Config, state: dict[str, Any], meta: dict[str, Any], ckpt: str, episodes: int,
                     deterministic: bool, seed: int) -> EvalResult:
    """A PettingZoo run's checkpoint: every agent acts with its policy's part (``policies/<name>/``)."""
    from kilorl.roles.agent_evaluation import AgentEpisodeRunner

    runner = AgentEpisodeRunner(cfg)
    states = state[POLICIES_DIR] if POLICIES_DIR in state else {name: state for name in runner.models}
    played = runner.play(states, episodes, seed, deterministic)
    return EvalResult(float(np.mean(played.returns)), float(np.std(played.returns)), episodes, played.returns, ckpt,
                      int(meta["env_steps"]), {p: float(np.mean(r)) for p, r in played.policy_returns.items()})
