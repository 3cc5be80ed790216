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
        if is_parallel_env(env):
            env.close()
            raise ValueError(f"env.id: {env_id!r} is a PettingZoo ParallelEnv, not one Gymnasium env: it steps as "
                             "agent columns of a vector env (make_vector_env); evaluation episodes of one are not "
                             "supported yet")
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps)
    else:
        env = gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)
    return env


def _is_gym_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, gym.Env)


def is_parallel_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo ``ParallelEnv`` (False where PettingZoo is not installed)."""
    try:
        from pettingzoo import ParallelEnv
    except ImportError:
        return False
    return isinstance(env, ParallelEnv)


def make_parallel_env(env_id: str, kwargs: dict[str, Any] | None = None) -> Any:
    """One PettingZoo ``ParallelEnv`` from a ``module:function`` entry point; ValueError when
    ``env_id`` is not one or builds something else."""
    if not _is_entry_point(env_id):
        raise ValueError(f"env.id: {env_id!r} is not a module:function entry point of a PettingZoo ParallelEnv")
    env = _load_entry_point(env_id)(**dict(kwargs or {}))
    if not is_parallel_env(env):
        raise ValueError(f"env.id: {env_id!r} built a {type(env).__name__}, not a PettingZoo ParallelEnv")
    return env


def make_vector_env(
    env_id: str,
    num_envs: int,
    kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    asynchronous: bool = False,
    max_num_agents: int | None = None,
    policy_mapping: dict[str, str] | None = None,
    critic_state: bool = False,
) -> gym.vector.VectorEnv:
    """A vector of ``num_envs`` copies; autoreset happens on the step after `done`.

    An entry point that returns a PettingZoo ``ParallelEnv`` gives ``AgentColumns`` instead:
    ``num_envs`` copies, each agent a column (``kilorl.envs.agent_columns``), its agents mapped
    to policies by ``policy_mapping`` (``multi_agent.policy_mapping``) when given."""
    if _is_entry_point(env_id) and not _is_gym_class(_load_entry_point(env_id)):
        probe = _load_entry_point(env_id)(**dict(kwargs or {}))
        if is_parallel_env(probe):
            if max_episode_steps is not None:
                probe.close()
                raise ValueError("env.max_episode_steps: not supported for a PettingZoo ParallelEnv; "
                                 "set the environment's own limit in env.kwargs (e.g. max_cycles)")
            from kilorl.envs.agent_columns import AgentColumns

            fns = [lambda: probe] + [lambda: make_parallel_env(env_id, kwargs) for _ in range(num_envs - 1)]
            return AgentColumns(fns, max_num_agents, policy_mapping, critic_state)
        probe.close()
    if policy_mapping is not None:
        raise ValueError(f"multi_agent: env.id {env_id!r} is not a PettingZoo ParallelEnv (its agents are what "
                         "multi_agent.policy_mapping maps)")
    fns = [lambda: make_env(env_id, kwargs, max_episode_steps) for _ in range(num_envs)]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def env_spaces(env_id: str, kwargs: dict[str, Any] | None = None, max_episode_steps: int | None = None,
               critic_state: bool = False) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of one column: the env's, or the one every agent of a
    PettingZoo environment shares (followed by the global state with ``critic_state``; built
    once, then closed)."""
    if _is_entry_point(env_id) and not _is_gym_class(_load_entry_point(env_id)):
        probe = _load_entry_point(env_id)(**dict(kwargs or {}))
        try:
            if is_parallel_env(probe):
                from kilorl.envs.agent_columns import column_spaces

                return column_spaces(probe, list(probe.possible_agents), critic_state)
        finally:
            probe.close()
    env = make_env(env_id, kwargs, max_episode_steps)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
