"""An env runner's environments cut into groups that step one after another, so that one
group's environments can step while the policy acts on another's (double-buffered sampling,
Sample Factory's ``worker_num_splits``).

With ``vector_env: subprocesses`` each group is its own ``AsyncVectorEnv``: ``step_async``
hands the actions to the group's subprocesses and returns, the env runner acts on the next
group, and ``step_wait`` collects the first group's results; the two overlap. In-process
groups step inside ``step_wait`` (nothing to overlap with, the same maths). Group ``g`` holds
the columns ``g * n / G`` up to ``(g + 1) * n / G`` of the env runner's ``[T, N]`` arrays and
is seeded with the seeds those envs have without groups, so one group is the plain vector env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from kilorl.envs.agent_columns import AgentColumns
from kilorl.envs.factory import make_vector_env

StepResult = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]
"""(obs, reward, terminated, truncated, info) of one group's step."""


class EnvGroups:
    """``num_groups`` vector envs of ``num_envs / num_groups`` environments each."""

    def __init__(self, env_id: str, num_envs: int, num_groups: int, kwargs: dict[str, Any] | None = None,
                 max_episode_steps: int | None = None, asynchronous: bool = False,
                 **agent_options: Any) -> None:
        """``agent_options``: ``make_vector_env``'s options for a PettingZoo environment
        (``max_num_agents``, ``policy_mapping``, ``critic_state``); such an environment is one group."""
        if num_groups < 1 or num_envs % num_groups:
            raise ValueError(f"parallelism.envs_per_actor={num_envs} must be a multiple of "
                             f"parallelism.env_groups={num_groups}")
        size = num_envs // num_groups
        self.groups: list[gym.vector.VectorEnv] = [
            make_vector_env(env_id, size, kwargs, max_episode_steps, asynchronous=asynchronous, **agent_options)]
        self.agents: AgentColumns | None = self.groups[0] if isinstance(self.groups[0], AgentColumns) else None
        """The agent columns of a PettingZoo environment (None: a Gymnasium one)."""
        if self.agents is not None and num_groups > 1:
            self.groups[0].close()
            raise ValueError(f"parallelism.env_groups={num_groups}: a PettingZoo environment ({env_id!r}) steps "
                             "as one group of agent columns")
        self.groups += [make_vector_env(env_id, size, kwargs, max_episode_steps, asynchronous=asynchronous)
                        for _ in range(num_groups - 1)]
        width = self.groups[0].num_envs  # agent columns: copies x max_num_agents
        self.num_envs = width * num_groups
        self.slices = [slice(g * width, (g + 1) * width) for g in range(num_groups)]
        """The env runner's columns of each group."""
        self.asynchronous = asynchronous and self.agents is None  # agent columns step in-process
        self._actions: list[Any] = [None] * num_groups
        self.single_observation_space = self.groups[0].single_observation_space
        self.single_action_space = self.groups[0].single_action_space

    def reset(self, seed: int) -> list[np.ndarray]:
        """Each group's first observations; env ``i`` gets seed ``seed + i`` as without groups."""
        return [env.reset(seed=seed + cols.start)[0] for env, cols in zip(self.groups, self.slices, strict=True)]

    def step_async(self, g: int, actions: Any) -> None:
        """Start group ``g``'s step (in its subprocesses, when it has them) and return."""
        if self.asynchronous:
            self.groups[g].step_async(actions)  # type: ignore[attr-defined]
        else:
            self._actions[g] = actions

    def step_wait(self, g: int) -> StepResult:
        """Group ``g``'s step results (an in-process group steps here)."""
        if self.asynchronous:
            return self.groups[g].step_wait()  # type: ignore[attr-defined]
        actions, self._actions[g] = self._actions[g], None
        return self.groups[g].step(actions)

    def close(self) -> None:
        for env in self.groups:
            env.close()
