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
from kilorl.envs.agent_columns import AgentColumns
from kilorl.envs.groups import EnvGroups
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
        self.envs = EnvGroups(env.id, n, cfg.parallelism.env_groups, env.kwargs, env.max_episode_steps,
                              asynchronous=cfg.parallelism.vector_env == "subprocesses",
                              max_num_agents=env.max_num_agents,
                              policy_mapping=cfg.multi_agent.policy_mapping if cfg.multi_agent else None,
                              critic_state=bool(cfg.multi_agent and cfg.multi_agent.centralized_critic == "state"))
        self.agents = self.envs.agents
        """The agent columns of a PettingZoo environment (None: a Gymnasium one)."""
        if self.agents is not None:
            self._check_agent_columns(self.agents, spec.alive_mask)
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        self.model = spec.load("model")(obs_space, act_space, cfg.model)
        self.model.eval()
        sync = cfg.sync
        self.copy = PolicyCopy(store, self.model, obs_space.shape, env.normalize_obs, env.normalize_reward,
                               mode=sync.mode, groups=sync.groups, max_staleness=sync.staleness(cfg.train.pipeline_depth))
        columns = self.envs.num_envs
        self.context = EnvRunnerContext(index=index, num_env_runners=cfg.parallelism.actor, num_envs=columns,
                                        obs_space=obs_space, action_space=act_space, seed=seed,
                                        total_env_steps=cfg.train.total_env_steps, run_seed=cfg.train.seed,
                                        model_state=self._model_state if getattr(self.model, "recurrent", False) else None)
        self.policy: BehaviourPolicy = spec.load("policy")(cfg.algo, self.context)
        self.group_obs = self.envs.reset(seed=seed)
        """Each env group's current observations."""
        self.state: State = self.policy.initial_state(columns)
        self.discount = cfg.algo.discount
        queue = getattr(cfg.algo, "queue", None)
        self.refresh_every: int | None = queue.refresh_every_steps if queue is not None else None
        """``algo.queue.refresh_every_steps``: how often a rollout looks for a newer version."""
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
            self.envs.close()
            raise ValueError(problem)

    def _model_state(self, n: int) -> State:
        """The recurrent model's state for ``n`` fresh episodes, as numpy arrays."""
        return {k: v.numpy() for k, v in self.model.initial_state(n).items()}

    @property
    def obs(self) -> np.ndarray:
        """The current observations of all envs, ``[N, ...]``."""
        return self.group_obs[0] if len(self.group_obs) == 1 else np.concatenate(self.group_obs)

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
        """One rollout of ``rollout_length`` steps. With several env groups, group ``g`` steps
        (in its subprocesses) while the policy acts on the next group: sampling double-buffered."""
        wait_s = self.copy.sync(min_version)
        t0 = time.perf_counter()
        T, N = self.cfg.algo.rollout_length, self.envs.num_envs
        buf = _RolloutBuffers(self._empty_steps(T, N), {k: v.copy() for k, v in self.state.items()},
                              np.zeros((T, N, *self.envs.single_observation_space.shape), np.float64)
                              if self.cfg.env.normalize_obs else None, np.zeros((T, N), np.float64))
        copies = self.agents.num_copies if self.agents is not None else N  # env steps per step of the vector
        versions = np.empty(T, np.int64)  # the version each step acted with
        for t in range(T):
            if self.refresh_every is not None and t and t % self.refresh_every == 0:
                t_refresh = time.perf_counter()
                self.copy.refresh()  # a newer version, if published: never a wait
                buf.refresh_s += time.perf_counter() - t_refresh
            versions[t] = self.version
            ctx = StepContext(env_steps + t * copies * self.cfg.parallelism.actor, self.version, self.index)
            for g in range(len(self.envs.slices)):
                if t:
                    self._finish_step(g, t - 1, buf)
                self._act(g, t, ctx, buf)
        for g in range(len(self.envs.slices)):
            self._finish_step(g, T - 1, buf)
        t_last = time.perf_counter()
        last_obs = self._observed(self.obs)
        final, last = buf.finals.record(self.policy, self.model, last_obs, self.state)
        buf.inference_s += time.perf_counter() - t_last
        moments = {keys.RET_MOMENTS: [Moments.of(buf.raw_returns)]} if self.cfg.env.normalize_reward else {}
        if buf.raw_obs is not None:
            moments[keys.OBS_MOMENTS] = [Moments.of(buf.raw_obs, self.envs.single_observation_space.shape)]
        first = int(versions[0])  # a rollout (and each of its columns) is as old as its first step
        rollout = Rollout(steps=buf.steps, last=last, moments=moments, version=first, final=final,
                          state=buf.start_state, env_steps_before=env_steps,
                          column_versions=np.full(N, first, np.int64))
        info_out = RolloutInfo(
            actor=self.index, version=first, env_steps=T * copies, episode_returns=buf.episodes_r,
            episode_lengths=buf.episodes_l, collect_s=time.perf_counter() - t0 - buf.refresh_s,
            wait_s=wait_s + buf.refresh_s, env_step_s=buf.env_step_s, inference_s=buf.inference_s,
        )
        if self.refresh_every is not None:
            info_out["step_versions"] = versions.tolist()
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

    def _act(self, g: int, t: int, ctx: StepContext, buf: _RolloutBuffers) -> None:
        """Record group ``g``'s observations at step ``t``, act on them and start its env step."""
        t_start = time.perf_counter()
        cols, raw = self.envs.slices[g], self.group_obs[g]
        if self.agents is not None:  # the agents acting at step t (one group)
            buf.steps[keys.ALIVE][t, cols] = self.agents.alive
        if buf.raw_obs is not None:
            buf.raw_obs[t, cols] = raw
        obs_in = self._observed(raw)
        buf.steps[keys.OBS][t, cols] = obs_in
        with torch.no_grad():
            actions, extras, state = self.policy.act(self.model, torch.from_numpy(obs_in), self._rows(cols), ctx)
        self._set_rows(cols, state)
        buf.steps[keys.ACTIONS][t, cols] = actions.numpy()
        for k, v in extras.items():
            buf.steps[k][t, cols] = v
        env_actions = self.model.to_env_action(actions)
        t_env = time.perf_counter()
        self.envs.step_async(g, env_actions)
        t_end = time.perf_counter()
        buf.inference_s += t_env - t_start
        buf.env_step_s += t_end - t_env

    def _finish_step(self, g: int, t: int, buf: _RolloutBuffers) -> None:
        """Wait for group ``g``'s step ``t`` and record it; reset the state of finished episodes."""
        t_start = time.perf_counter()
        cols = self.envs.slices[g]
        self.group_obs[g], reward, terminated, truncated, info = self.envs.step_wait(g)
        buf.env_step_s += time.perf_counter() - t_start
        reward = np.asarray(reward, np.float64)
        done, buf.raw_returns[t, cols] = self._account(cols, reward, terminated, truncated, buf.episodes_r,
                                                       buf.episodes_l)
        buf.steps[keys.REWARDS][t, cols] = self._scale(reward)
        buf.steps[keys.TERMINATED][t, cols] = terminated
        buf.steps[keys.TRUNCATED][t, cols] = truncated
        if done.any():
            idx = np.flatnonzero(done)
            rows = self._rows(cols)
            # the final observations' bootstrap values use the state before the reset
            buf.finals.add(t, idx + cols.start, self._observed(np.stack([info["final_obs"][i] for i in idx])),
                           {k: v[idx].copy() for k, v in rows.items()})
            self._set_rows(cols, self.policy.reset(rows, done))

    def _rows(self, cols: slice) -> State:
        """The behaviour policy's state of one group's envs (all of it with one group)."""
        if len(self.envs.slices) == 1:
            return self.state
        return {k: v[cols] for k, v in self.state.items()}

    def _set_rows(self, cols: slice, state: State) -> None:
        if len(self.envs.slices) == 1:
            self.state = state
            return
        for k, v in state.items():
            self.state[k][cols] = v

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

    def _account(self, cols: slice, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 episodes_r: list[float], episodes_l: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Episode returns/lengths of one group's envs; returns ``done`` and the discounted return
        (for reward scaling)."""
        done = np.logical_or(terminated, truncated)
        ep_return, ep_length, discounted = self.ep_return[cols], self.ep_length[cols], self.discounted[cols]
        ep_return += reward  # views: the runner's own arrays
        ep_length += 1
        if self.discount is not None:
            discounted *= self.discount
            discounted += reward
        out = discounted.copy()
        for i in np.flatnonzero(done):
            episodes_r.append(float(ep_return[i]))
            episodes_l.append(int(ep_length[i]))
        ep_return[done] = 0.0
        ep_length[done] = 0
        discounted[done] = 0.0
        return done, out

    def close(self) -> None:
        self.envs.close()


class _RolloutBuffers:
    """What one rollout fills in as its env groups step: the step record, the finished
    episodes, the normalisers' raw statistics and the stage times."""

    def __init__(self, steps: dict[str, np.ndarray], start_state: State, raw_obs: np.ndarray | None,
                 raw_returns: np.ndarray) -> None:
        self.steps, self.start_state, self.raw_obs, self.raw_returns = steps, start_state, raw_obs, raw_returns
        self.finals = FinalObservations()
        self.episodes_r: list[float] = []
        self.episodes_l: list[int] = []
        self.env_step_s = 0.0
        """Seconds the runner spent in its environments' steps (waiting for them, in subprocesses)."""
        self.inference_s = 0.0
        """Seconds in the behaviour policy (acting, and the bootstrap values of the rollout's end)."""
        self.refresh_s = 0.0
        """Seconds looking for (and taking) newer versions mid-rollout: parameter time, like ``wait_s``."""
