"""Evaluate a checkpoint: run whole episodes with the saved policy and normalizers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.config import config_from_dict
from kilorl.envs import make_env
from kilorl.envs.normalization import normalize
from kilorl.trainer.checkpoint import load_checkpoint, resolve_checkpoint


@dataclass
class EvalResult:
    episode_return_mean: float
    episode_return_std: float
    episodes: int
    returns: list[float]
    checkpoint: str
    env_steps: int


def evaluate(path: str | Path, episodes: int = 20, deterministic: bool = True, seed: int = 1_000_000) -> EvalResult:
    """Mean/std return of ``episodes`` full episodes, each from its own seed."""
    ckpt = resolve_checkpoint(Path(path))
    state, meta = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"])
    env = make_env(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps)
    model = get_algorithm(cfg.algo.name).load("model")(env.observation_space, env.action_space, cfg.model)
    model.load_state_dict(state["model"])
    model.eval()
    mean, var = state["obs_rms"]["mean"], state["obs_rms"]["var"]
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            o = normalize(obs, mean, var, cfg.env.clip_obs) if cfg.env.normalize_obs else np.asarray(obs, np.float32)
            action, _, _ = model.act(torch.from_numpy(o)[None], deterministic=deterministic)
            obs, reward, terminated, truncated, _ = env.step(model.to_env_action(action)[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return EvalResult(float(np.mean(returns)), float(np.std(returns)), episodes, returns, str(ckpt), int(meta["env_steps"]))
