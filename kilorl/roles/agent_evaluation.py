"""Whole episodes of a PettingZoo environment, each agent acting with its policy's saved state:
what ``kilorl eval`` plays for a multi-agent run.

The episodes are played side by side (episode ``k`` from seed ``seed + k``), one batched forward
pass per policy and step over every live agent that maps to it, as ``EpisodeRunner`` does for
one Gymnasium env per episode. An episode's return is the sum of its agents' returns (the
training rows' ``episode_return_mean``); each policy's return is the sum over its own agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.envs.agent_mapping import map_agents
from kilorl.envs.factory import env_spaces, make_parallel_env
from kilorl.envs.normalization import normalize

if TYPE_CHECKING:
    from kilorl.config import Config

ONE_POLICY = "policy"
"""The policy's name in a multi-agent run without several policies (every agent on the run's one)."""


@dataclass
class AgentEpisodes:
    """The returns of the episodes played: the sum over agents, and per policy over its agents."""

    returns: list[float] = field(default_factory=list)
    policy_returns: dict[str, list[float]] = field(default_factory=dict)


class AgentEpisodeRunner:
    """One model per policy of a multi-agent run, and the agent-to-policy mapping."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        section = cfg.multi_agent
        self.views: dict[str, Config] = cfg.policy_configs() if section is not None and section.several else {}
        if not self.views:
            self.views = {next(iter(section.policies)) if section is not None else ONE_POLICY: cfg}
        self.mapping = dict(section.policy_mapping) if section is not None else {"*": next(iter(self.views))}
        self.critic_state = section is not None and section.centralized_critic == "state"
        obs_space, act_space = env_spaces(cfg.env.id, cfg.env.kwargs, cfg.env.max_episode_steps, self.critic_state)
        self.models: dict[str, torch.nn.Module] = {}
        with torch.random.fork_rng(devices=[]):  # the weights are the checkpoint's: draw none from anyone's stream
            for name, view in self.views.items():
                self.models[name] = get_algorithm(view.algo.name).load("model")(obs_space, act_space, view.model)
                self.models[name].eval()

    def play(self, states: Mapping[str, dict[str, Any]], episodes: int, seed: int,
             deterministic: bool = True) -> AgentEpisodes:
        """``episodes`` whole episodes with each policy's ``states[policy]`` (a learner state)."""
        missing = sorted(set(self.models) - set(states))
        if missing:
            raise ValueError(f"multi_agent.policies: no saved state for {missing} (have {sorted(states)})")
        for name, model in self.models.items():
            model.load_state_dict(states[name]["model"])
        envs = [make_parallel_env(self.cfg.env.id, self.cfg.env.kwargs) for _ in range(episodes)]
        try:
            return self._play(envs, states, seed, deterministic)
        finally:
            for env in envs:
                env.close()

    def _play(self, envs: list[Any], states: Mapping[str, dict[str, Any]], seed: int,
              deterministic: bool) -> AgentEpisodes:
        obs = [env.reset(seed=seed + k)[0] for k, env in enumerate(envs)]
        agent_returns: list[dict[str, float]] = [{} for _ in envs]
        policy_of = map_agents(self.mapping, list(envs[0].possible_agents))
        steps = [0] * len(envs)
        limit = self.cfg.env.max_episode_steps
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            while True:
                live = [k for k, env in enumerate(envs) if env.agents and (limit is None or steps[k] < limit)]
                if not live:
                    break
                actions: list[dict[str, Any]] = [{} for _ in envs]
                for name, model in self.models.items():
                    who = [(k, a) for k in live for a in envs[k].agents if policy_of.get(a) == name]
                    if not who:
                        continue
                    batch = np.stack([self._column(envs[k], obs[k][a], states[name]) for k, a in who])
                    chosen = model.to_env_action(model.policy(torch.from_numpy(batch), deterministic))
                    for (k, a), act in zip(who, chosen, strict=True):
                        actions[k][a] = act
                for k in live:
                    obs[k], rewards, _, _, _ = envs[k].step(actions[k])
                    steps[k] += 1
                    for agent, r in rewards.items():
                        agent_returns[k][agent] = agent_returns[k].get(agent, 0.0) + float(r)
        out = AgentEpisodes()
        for returns in agent_returns:
            out.returns.append(float(sum(returns.values())))
            for name in self.models:
                mine = sum(r for a, r in returns.items() if policy_of.get(a) == name)
                out.policy_returns.setdefault(name, []).append(float(mine))
        return out

    def _column(self, env: Any, agent_obs: Any, state: dict[str, Any]) -> np.ndarray:
        """What the policy saw in training: the agent's observation (then the global state with
        a centralised critic), normalised where the run normalised it."""
        column = np.asarray(agent_obs)
        if self.critic_state:
            column = np.concatenate([np.ravel(agent_obs), np.ravel(env.state())]).astype(np.float32)
        env_cfg = self.cfg.env
        if env_cfg.normalize_obs:
            column = normalize(column, state["obs_rms"]["mean"], state["obs_rms"]["var"], env_cfg.clip_obs)
        return column
