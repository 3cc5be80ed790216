"""Build Gymnasium environments from a config's ``env`` section."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym


def _is_entry_point(env_id: str) -> bool:
    return ":" in env_id


def _load_entry_point(env_id: str) -> Callable[..., gym.Env]:
    module_name, _, attr = env_id.partition(":")
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def check_env_id(env_id: str) -> str | None:
    """Return a human-readable problem with ``env_id``, or None when it resolves."""
    if _is_entry_point(env_id):
        try:
            _load_entry_point(env_id)
        except (ImportError, AttributeError) as err:
            return f"cannot load entry point {env_id!r}: {err}"
        return None
    if env_id in gym.envs.registry:
        return None
    close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown Gymnasium environment {env_id!r}{hint}"


def make_env(
    env_id: str,
    kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
) -> gym.Env:
    """One environment, wrapped to record episode statistics."""
    kwargs = dict(kwargs or {})
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if _is_entry_point(env_id):
        env = _load_entry_point(env_id)(**kwargs)
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps)
    else:
        env = gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)
    return env


def make_vector_env(
    env_id: str,
    num_envs: int,
    kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    asynchronous: bool = False,
) -> gym.vector.VectorEnv:
    """A vector of ``num_envs`` copies; autoreset happens on the step after `done`."""
    fns = [lambda: make_env(env_id, kwargs, max_episode_steps) for _ in range(num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
