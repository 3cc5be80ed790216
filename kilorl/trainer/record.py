"""``kilorl record``: play whole episodes with a trained run's policy (optionally noised, for
sub-optimal data), a random policy or a ``module:function`` and write them as a Minari dataset
(``kilorl.datasets``). Seeded: episode k resets with ``seed + k``, and the random policy's and
the noise's draws come from generators seeded by ``seed``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from kilorl.datasets import Episode, write_dataset
from kilorl.envs import make_env

Policy = Callable[[np.ndarray], Any]
"""One observation -> one env action."""


def play(env: gym.Env, policy: Policy, episodes: int, seed: int) -> list[Episode]:
    """``episodes`` whole episodes, episode k reset with ``seed + k``."""
    out = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        rows: dict[str, list] = {"observations": [obs], "actions": [], "rewards": [], "terminations": [], "truncations": []}
        done = False
        while not done:
            action = policy(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in (("observations", obs), ("actions", action), ("rewards", reward),
                               ("terminations", terminated), ("truncations", truncated)):
                rows[key].append(value)
            done = terminated or truncated
        out.append(Episode(np.asarray(rows["observations"]), np.asarray(rows["actions"]),
                           np.asarray(rows["rewards"], np.float64), np.asarray(rows["terminations"], bool),
                           np.asarray(rows["truncations"], bool), seed=seed + k))
    return out


def named_policy(name: str, env: gym.Env, seed: int) -> Policy:
    """``random`` (the action space's own sampler, seeded) or ``module:function`` (called with
    one observation and the action space)."""
    if name == "random":
        env.action_space.seed(seed)
        return lambda obs: env.action_space.sample()
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(f"--policy {name!r}: expected 'random' or 'module:function'")
    fn = getattr(importlib.import_module(module), attr)
    return lambda obs: fn(obs, env.action_space)


def checkpoint_policy(run: str | Path, seed: int, noise: float, deterministic: bool,
                      checkpoint: str | None = None) -> tuple[Policy, Any]:
    """A run's policy (and its config): the model's action, plus Gaussian noise of ``noise``
    half-widths of a Box action space, clipped into its bounds."""
    import torch

    from kilorl.algos import get as get_algorithm
    from kilorl.config import config_from_dict
    from kilorl.envs.normalization import normalize
    from kilorl.trainer.checkpoint import load_checkpoint, resolve_checkpoint, select_checkpoint

    ckpt = select_checkpoint(Path(run), checkpoint) if checkpoint else resolve_checkpoint(Path(run))
    state, meta = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"])
    probe = make_env(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps)
    space = probe.action_space
    model = get_algorithm(cfg.algo.name).load("model")(probe.observation_space, space, cfg.model)
    probe.close()
    model.load_state_dict(state["model"])
    model.eval()
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)

    def policy(obs: np.ndarray) -> Any:
        seen = normalize(obs, state["obs_rms"]["mean"], state["obs_rms"]["var"], cfg.env.clip_obs) \
            if cfg.env.normalize_obs else np.asarray(obs)
        with torch.no_grad():
            action = model.to_env_action(model.policy(torch.from_numpy(seen[None]), deterministic))[0]
        if noise and isinstance(space, gym.spaces.Box):
            half = (space.high - space.low) / 2.0
            action = np.clip(action + rng.normal(size=action.shape) * noise * half, space.low, space.high)
        return action.astype(space.dtype) if isinstance(space, gym.spaces.Box) else action

    return policy, cfg


def record(out: str | Path, episodes: int, seed: int, *, env_id: str | None = None, policy: str = "random",
           run: str | Path | None = None, noise: float = 0.0, deterministic: bool = True,
           env_kwargs: dict[str, Any] | None = None) -> Path:
    """Record ``episodes`` episodes to the dataset directory ``out``; returns its data directory."""
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if run is not None:
        act, cfg = checkpoint_policy(run, seed, noise, deterministic)
        env_id, kwargs, limit = cfg.env.id, {**cfg.env.kwargs, **(env_kwargs or {})}, cfg.env.max_episode_steps
        source = f"run {run}" + (f" with noise {noise}" if noise else "")
    elif env_id is not None:
        kwargs, limit, source = env_kwargs or {}, None, f"policy {policy}"
    else:
        raise ValueError("record needs a RUN_DIR or --env ID")
    env = make_env(env_id, kwargs, limit)
    try:
        if run is None:
            act = named_policy(policy, env, seed)
        eps = play(env, act, episodes, seed)
        return write_dataset(out, eps, env.observation_space, env.action_space, dataset_id=Path(out).name,
                             env_id=env_id, extra={"algorithm_name": source, "seed": seed,
                                                   "env_kwargs": json_safe(kwargs)})
    finally:
        env.close()


def json_safe(value: Any) -> Any:
    """``env.kwargs`` for metadata.json (anything not JSON as its string)."""
    import json

    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
