"""The env runner: vectorized environments stepped by the algorithm's behaviour policy.

Generic over algorithms: the behaviour policy picks the actions, holds its state and says
which extras to keep per step; the env runner keeps the full step record every algorithm
can learn from (``kilorl.core.Rollout``): observations in the env's dtype, ``terminated``
and ``truncated`` apart, each finished episode's real final observation, s_T, the policy's
state at rollout start. What an algorithm derives from it (bootstrap values, GAE, n-step
returns) it derives itself. Two normalisation stages are opt-in (``env.normalize_obs``,
``env.normalize_reward``): with them the record holds what the policy saw. Rollouts stay
``[T, N, ...]``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, EnvRunnerContext, State, StepContext
from kilorl.core import Actor, ParameterStore, Rollout, RolloutInfo
from kilorl.envs import make_vector_env
from kilorl.envs.agent_columns import AgentColumns
from kilorl.envs.normalization import Moments, normalize
from kilorl.roles.heap import retain_freed_memory
from kilorl.roles.policy_copy import COPY_IN_MAX_BYTES, PolicyCopy
from kilorl.roles.step_record import FinalObservations, check_extras

if TYPE_CHECKING:
    from kilorl.config import Config

__all__ = ["COPY_IN_MAX_BYTES", "EnvRunner"]


class EnvRunner(Actor):
    """Collects ``rollout_length`` steps from ``envs_per_actor`` environments per call.

    Plain Python; the trainer wraps it in a Ray actor (the ``actor`` role). Parameters come
    from the parameter store (only the tensors this runner's layout needs); raw observation
    and return moments go back with the rollout so the learner can merge normaliser stats.
    """

    def __init__(self, cfg: Config, store: ParameterStore, index: int, seed: int) -> None:
        torch.set_num_threads(cfg.train.torch_threads)
        retain_freed_memory(cfg.train.retain_freed_memory_mb)
        torch.manual_seed(seed)
        self.cfg, self.store, self.index = cfg, store, index
        spec = get_algorithm(cfg.algo.name)
        env = cfg.env
        n = cfg.parallelism.envs_per_actor
        self.envs = make_vector_env(env.id, n, env.kwargs, env.max_episode_steps,
                                    asynchronous=cfg.parallelism.vector_env == "subprocesses",
                                    max_num_agents=env.max_num_agents,
                                    policy_mapping=cfg.multi_agent.policy_mapping if cfg.multi_agent else None,
                                    critic_state=bool(cfg.multi_agent and cfg.multi_agent.centralized_critic == "state"))
        self.agents = self.envs if isinstance(self.envs, AgentColumns) else None
        """The agent columns of a PettingZoo environment (None: a Gymnasium one)."""
        if self.agents is not None:
            self._check_agent_columns(self.agents, spec.alive_mask)
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        self.model = spec.load("model")(obs_space, act_space, cfg.model)
        self.model.eval()
        sync = cfg.sync
        self.copy = PolicyCopy(store, self.model, obs_space.shape, env.normalize_obs, env.normalize_reward,
                               mode=sync.mode, groups=sync.groups, max_staleness=sync.staleness(cfg.train.pipeline_depth))
        self.context = EnvRunnerContext(index=index, num_env_runners=cfg.parallelism.actor, num_envs=self.envs.num_envs,
                                        obs_space=obs_space, action_space=act_space, seed=seed,
                                        total_env_steps=cfg.train.total_env_steps, run_seed=cfg.train.seed,
                                        model_state=self._model_state if getattr(self.model, "recurrent", False) else None)
        self.policy: BehaviourPolicy = spec.load("policy")(cfg.algo, self.context)
        self.obs, _ = self.envs.reset(seed=seed)
        columns = self.envs.num_envs
        self.state: State = self.policy.initial_state(columns)
        self.discount = cfg.algo.discount
        self.discounted = np.zeros(columns, np.float64)
        self.ep_return = np.zeros(columns, np.float64)
        self.ep_length = np.zeros(columns, np.int64)
        self._check_extras()

    def _check_agent_columns(self, agents: AgentColumns, alive_mask: bool) -> None:
        """A PettingZoo environment needs an algorithm that masks dead columns, and a centralised
        critic a policy input of exactly one agent's observation; else the envs close and a
        ValueError names the field."""
        cfg = self.cfg
        problem = None
        if not alive_mask:
            problem = (f"env.id: {cfg.env.id!r} is a PettingZoo environment, and algo.name={cfg.algo.name!r} "
                       "does not mask dead agent columns out of its losses")
        elif agents.critic_state and cfg.model.actor_inputs != agents.agent_obs_dim:
            problem = (f"model.actor_inputs={cfg.model.actor_inputs}: with multi_agent.centralized_critic: state "
                       f"it must be one agent's observation size, {agents.agent_obs_dim}")
        if problem is not None:
            agents.close()
            raise ValueError(problem)

    def _model_state(self, n: int) -> State:
        """The recurrent model's state for ``n`` fresh episodes, as numpy arrays."""
        return {k: v.numpy() for k, v in self.model.initial_state(n).items()}

    @property
    def version(self) -> int:
        return self.copy.version

    def ready(self) -> int:
        return self.index

    def _check_extras(self) -> None:
        """One step of the policy on the first observations, its RNG and state put back: a
        policy whose extras break their declaration fails here, at start-up, naming the entry."""
        state = {k: v.copy() for k, v in self.state.items()}
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            _, extras, _ = self.policy.act(self.model, torch.from_numpy(self._observed(self.obs)), state,
                                           StepContext(0, self.version, self.index))
        check_extras(type(self.policy).__name__, self.policy.extras, extras, self.envs.num_envs)

    def _observed(self, obs: np.ndarray) -> np.ndarray:
        """What the policy sees: the env's observation as it is, or normalised (float32)."""
        if not self.cfg.env.normalize_obs:
            return np.asarray(obs)
        return normalize(obs, self.copy.obs_mean, self.copy.obs_var, self.cfg.env.clip_obs)

    def _scale(self, reward: np.ndarray) -> np.ndarray:
        env = self.cfg.env
        if env.normalize_reward:
            reward = np.clip(reward / np.sqrt(float(self.copy.ret_var) + 1e-8), -env.clip_reward, env.clip_reward)
        return reward.astype(np.float32)

    # ---- rollout ------------------------------------------------------------------------
    def collect(self, min_version: int, env_steps: int = 0) -> tuple[Rollout, RolloutInfo]:
        wait_s = self.copy.sync(min_version)
        t0 = time.perf_counter()
        T, N = self.cfg.algo.rollout_length, self.envs.num_envs
        steps = self._empty_steps(T, N)
        start_state = {k: v.copy() for k, v in self.state.items()}
        finals = FinalObservations()
        raw_obs = np.zeros((T, N, *self.envs.single_observation_space.shape), np.float64) if self.cfg.env.normalize_obs else None
        raw_returns = np.zeros((T, N), np.float64)
        episodes_r: list[float] = []
        episodes_l: list[int] = []
        copies = self.agents.num_copies if self.agents is not None else N  # env steps per step of the vector
        per_step = copies * self.cfg.parallelism.actor
        for t in range(T):
            if self.agents is not None:
                steps[keys.ALIVE][t] = self.agents.alive
            if raw_obs is not None:
                raw_obs[t] = self.obs
            obs_in = self._observed(self.obs)
            steps[keys.OBS][t] = obs_in
            ctx = StepContext(env_steps + t * per_step, self.version, self.index)
            with torch.no_grad():
                actions, extras, self.state = self.policy.act(self.model, torch.from_numpy(obs_in), self.state, ctx)
            steps[keys.ACTIONS][t] = actions.numpy()
            for k, v in extras.items():
                steps[k][t] = v
            self.obs, reward, terminated, truncated, info = self.envs.step(self.model.to_env_action(actions))
            reward = np.asarray(reward, np.float64)
            done, raw_returns[t] = self._account(reward, terminated, truncated, episodes_r, episodes_l)
            steps[keys.REWARDS][t] = self._scale(reward)
            steps[keys.TERMINATED][t] = terminated
            steps[keys.TRUNCATED][t] = truncated
            if done.any():
                idx = np.flatnonzero(done)
                # the final observations' bootstrap values use the state before the reset
                finals.add(t, idx, self._observed(np.stack([info["final_obs"][i] for i in idx])),
                           {k: v[idx].copy() for k, v in self.state.items()})
                self.state = self.policy.reset(self.state, done)
        last_obs = self._observed(self.obs)
        final, last = finals.record(self.policy, self.model, last_obs, self.state)
        moments = {keys.RET_MOMENTS: [Moments.of(raw_returns)]} if self.cfg.env.normalize_reward else {}
        if raw_obs is not None:
            moments[keys.OBS_MOMENTS] = [Moments.of(raw_obs, self.envs.single_observation_space.shape)]
        rollout = Rollout(steps=steps, last=last, moments=moments, version=self.version, final=final,
                          state=start_state, env_steps_before=env_steps,
                          column_versions=np.full(N, self.version, np.int64))
        info_out = RolloutInfo(
            actor=self.index, version=self.version, env_steps=T * copies, episode_returns=episodes_r,
            episode_lengths=episodes_l, collect_s=time.perf_counter() - t0, wait_s=wait_s,
        )
        if self.agents is not None:
            self._agent_episodes(info_out)
        return rollout, info_out

    def _agent_episodes(self, info: RolloutInfo) -> None:
        """A multi-agent rollout's episodes are its copies' episodes: the sum of the agents'
        returns (RLlib's convention), and each agent's own return in ``agent_returns``."""
        assert self.agents is not None
        episodes = self.agents.take_episodes()
        info["episode_returns"] = [e.total for e in episodes]
        info["episode_lengths"] = [e.length for e in episodes]
        per_agent: dict[str, list[float]] = {}
        for e in episodes:
            for agent, ret in e.agent_returns.items():
                per_agent.setdefault(agent, []).append(ret)
        info["agent_returns"] = per_agent

    def _empty_steps(self, T: int, N: int) -> dict[str, np.ndarray]:
        space = self.envs.single_observation_space
        obs_dtype = np.float32 if self.cfg.env.normalize_obs else space.dtype
        act_space = self.envs.single_action_space
        alive = {keys.ALIVE: np.zeros((T, N), bool)} if self.agents is not None else {}
        return {
            **alive,
            keys.OBS: np.zeros((T, N, *space.shape), obs_dtype),
            keys.ACTIONS: np.zeros((T, N, *act_space.shape), np.int64 if self.model.discrete else np.float32),
            keys.REWARDS: np.zeros((T, N), np.float32),
            keys.TERMINATED: np.zeros((T, N), bool),
            keys.TRUNCATED: np.zeros((T, N), bool),
            **{k: np.zeros((T, N, *e.shape), e.dtype) for k, e in self.policy.extras.items()},
        }

    def _account(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 episodes_r: list[float], episodes_l: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Episode returns/lengths; returns ``done`` and the discounted return (for reward scaling)."""
        done = np.logical_or(terminated, truncated)
        self.ep_return += reward
        self.ep_length += 1
        if self.discount is not None:
            self.discounted = self.discounted * self.discount + reward
        discounted = self.discounted.copy()
        for i in np.flatnonzero(done):
            episodes_r.append(float(self.ep_return[i]))
            episodes_l.append(int(self.ep_length[i]))
        self.ep_return[done] = 0.0
        self.ep_length[done] = 0
        self.discounted[done] = 0.0
        return done, discounted

    def close(self) -> None:
        self.envs.close()
