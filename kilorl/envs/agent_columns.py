"""PettingZoo parallel environments as one vector env whose columns are agents.

kiloRL's step record is ``[T, N]`` (time, column). A multi-agent environment fills it with
``copies x max_num_agents`` columns: column ``c * max_num_agents + s`` is agent slot ``s`` of
copy ``c``. An agent holds its slot from the step it appears until it terminates or is
truncated; a slot with no agent is dead (``alive`` false: its observation is zeros, its
reward 0, and the learner masks it out of every loss). An agent that appears mid-episode
takes the lowest free slot, up to ``max_num_agents``. When a copy has no agents left its
episode is over and it resets on the same step (Gymnasium's ``SAME_STEP`` autoreset: the
returned observation is the new episode's, the agent's last one is in ``info["final_obs"]``).

Env steps are steps of a copy (all its agents at once); agent steps are ``T x N`` columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from kilorl.envs.agent_mapping import check_policy_spaces, map_agents


@dataclass
class MultiAgentEpisode:
    """One copy's finished episode: every agent's own return, and their sum."""

    agent_returns: dict[str, float] = field(default_factory=dict)
    length: int = 0

    @property
    def total(self) -> float:
        """Sum of the agents' returns (RLlib's ``episode_return`` of a multi-agent episode)."""
        return float(sum(self.agent_returns.values()))


def shared_spaces(env: Any, agents: Sequence[str]) -> tuple[gym.Space, gym.Space]:
    """The observation and action space every one of ``agents`` has; ValueError naming the agents
    whose spaces differ (their columns share one network, so one space)."""
    first = agents[0]
    obs, act = env.observation_space(first), env.action_space(first)
    odd = [a for a in agents[1:] if env.observation_space(a) != obs or env.action_space(a) != act]
    if odd:
        raise ValueError(f"env.id: agents {odd} have observation/action spaces different from {first!r} "
                         f"({obs}, {act}); agents sharing one policy need the same spaces")
    return obs, act


def column_spaces(env: Any, agents: Sequence[str], critic_state: bool = False) -> tuple[gym.Space, gym.Space]:
    """One column's observation and action space: the agents' shared ones, the observation
    followed by the environment's global state with ``critic_state`` (flat float32)."""
    obs, act = shared_spaces(env, agents)
    if not critic_state:
        return obs, act
    state = getattr(env, "state_space", None)
    if not isinstance(obs, gym.spaces.Box) or not isinstance(state, gym.spaces.Box):
        raise ValueError(f"multi_agent.centralized_critic: state needs Box observations and a Box state_space; "
                         f"the env has {obs} and {state}")
    size = int(np.prod(obs.shape)) + int(np.prod(state.shape))
    return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32), act


class AgentColumns(gym.vector.VectorEnv):
    """``copies`` PettingZoo ``ParallelEnv``\\s stepped as ``copies * max_num_agents`` columns."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, fns: Sequence[Callable[[], Any]], max_num_agents: int | None = None,
                 policy_mapping: Mapping[str, str] | None = None, critic_state: bool = False) -> None:
        self.copies = [fn() for fn in fns]
        first = self.copies[0]
        self.possible_agents = list(first.possible_agents)
        self.policy_mapping = policy_mapping
        """``multi_agent.policy_mapping`` (None: no mapping; every agent on the one policy)."""
        self.agent_policy = self._map(first, self.possible_agents)
        self.slots = int(max_num_agents or getattr(first, "max_num_agents", len(self.possible_agents)))
        if self.slots < 1:
            raise ValueError(f"env.max_num_agents must be at least 1, got {self.slots}")
        self.critic_state = critic_state
        """Each column's observation is the agent's own, then the copy's global ``state()`` (MAPPO)."""
        self.agent_obs_dim = int(np.prod(shared_spaces(first, self.possible_agents)[0].shape))
        self.single_observation_space, self.single_action_space = column_spaces(first, self.possible_agents,
                                                                                critic_state)
        self.num_copies = len(self.copies)
        self.num_envs = self.num_copies * self.slots
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.slot_agent: list[list[str | None]] = [[None] * self.slots for _ in self.copies]
        self.alive = np.zeros(self.num_envs, bool)
        """Which columns hold an agent in the observation last returned."""
        self._episodes = [MultiAgentEpisode() for _ in self.copies]
        self._finished: list[MultiAgentEpisode] = []

    def _map(self, env: Any, agents: Sequence[str]) -> dict[str, str]:
        """``agents``' policies by ``policy_mapping`` (errors name unmapped agents, and agents of
        different spaces on one policy); empty without a mapping."""
        if self.policy_mapping is None:
            return {}
        assignment = map_agents(self.policy_mapping, agents)
        check_policy_spaces(env, assignment)
        return assignment

    # ---- columns ---------------------------------------------------------------------------
    def column_agents(self) -> list[str | None]:
        """The agent in each column now (None: a dead slot)."""
        return [agent for slots in self.slot_agent for agent in slots]

    def _blank(self) -> np.ndarray:
        space = self.single_observation_space
        return np.zeros((self.num_envs, *space.shape), space.dtype)

    def _state(self, env: Any) -> np.ndarray | None:
        """The copy's global state now, where columns carry it (else None)."""
        return np.ravel(env.state()) if self.critic_state else None

    def _column(self, agent_obs: Any, state: np.ndarray | None) -> np.ndarray:
        """What a column observes: the agent's observation, followed by the global state if any."""
        if state is None:
            return np.asarray(agent_obs)
        return np.concatenate([np.ravel(agent_obs), state]).astype(np.float32)

    def _place(self, c: int, agents: Sequence[str], obs: dict[str, Any], out: np.ndarray) -> None:
        """Give every agent of ``agents`` without a slot in copy ``c`` the lowest free one."""
        slots = self.slot_agent[c]
        state = self._state(self.copies[c])
        held = {a for a in slots if a is not None}
        for agent in agents:
            if agent in held:
                continue
            if agent not in obs:
                raise ValueError(f"env.id: agent {agent!r} is live but the env returned no observation for it")
            try:
                s = slots.index(None)
            except ValueError:
                raise ValueError(f"env.id: agent {agent!r} appeared with all env.max_num_agents={self.slots} "
                                 f"slots of the copy taken by {slots}") from None
            if agent not in self.possible_agents:
                self.agent_policy.update(self._map(self.copies[c], [self.possible_agents[0], agent]))
                shared_spaces(self.copies[c], [self.possible_agents[0], agent])
            slots[s] = agent
            self.alive[c * self.slots + s] = True
            out[c * self.slots + s] = self._column(obs[agent], state)

    def _reset_copy(self, c: int, seed: int | None, out: np.ndarray) -> None:
        obs, _ = self.copies[c].reset(seed=seed)
        self.slot_agent[c] = [None] * self.slots
        self.alive[c * self.slots:(c + 1) * self.slots] = False
        self._episodes[c] = MultiAgentEpisode()
        self._place(c, list(self.copies[c].agents), obs, out)

    # ---- the vector env --------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + c for c in range(self.num_copies)]
        out = self._blank()
        for c in range(self.num_copies):
            self._reset_copy(c, seeds[c], out)
        return out, {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        out = self._blank()
        rewards = np.zeros(self.num_envs, np.float64)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        final_obs = np.full(self.num_envs, None, object)
        for c, env in enumerate(self.copies):
            base, slots = c * self.slots, self.slot_agent[c]
            acting = {a: self._env_action(actions[base + s]) for s, a in enumerate(slots) if a is not None}
            obs, rew, term, trunc, _ = env.step(acting)
            state = self._state(env)
            episode = self._episodes[c]
            episode.length += 1
            for s, agent in enumerate(slots):
                if agent is None:
                    continue
                i = base + s
                rewards[i] = float(rew.get(agent, 0.0))
                terminated[i], truncated[i] = bool(term.get(agent, False)), bool(trunc.get(agent, False))
                episode.agent_returns[agent] = episode.agent_returns.get(agent, 0.0) + float(rewards[i])
                if terminated[i] or truncated[i]:
                    final_obs[i] = self._column(obs[agent], state)
                    slots[s] = None
                    self.alive[i] = False
                else:
                    out[i] = self._column(obs[agent], state)
            if env.agents:
                self._place(c, list(env.agents), obs, out)
            else:
                self._finished.append(episode)
                self._reset_copy(c, None, out)
        done = terminated | truncated
        return out, rewards, terminated, truncated, {"final_obs": final_obs, "_final_obs": done}

    def _env_action(self, action: np.ndarray) -> Any:
        if isinstance(self.single_action_space, gym.spaces.Discrete):
            return int(action)
        return np.asarray(action, self.single_action_space.dtype)

    def take_episodes(self) -> list[MultiAgentEpisode]:
        """The copies' episodes that ended since the last call."""
        out, self._finished = self._finished, []
        return out

    def close(self, **kwargs: Any) -> None:
        for env in self.copies:
            env.close()
