"""An env runner for several policies (``multi_agent.policies``): each agent column acts with
its agent's policy, and each policy gets a rollout of its own.

Every policy keeps one model, one copy of its published versions (``policy/<name>``) and one
behaviour policy, built from its view of the run (``kilorl.config_policies``), so the parts
are the single-policy ones. At each step every policy acts on all columns and a column takes
the action of the policy its agent maps to; a policy's rollout is the shared step record with
its own extras (log-probs, values) and an alive mask that is true only on the rows its agents
held. So the learners' alive-masked losses see exactly their own agents' steps, and the
shapes stay ``[T, N]`` for every policy. The price is one forward pass per policy over all
columns (cheap for the small networks of agent-level policies; a gather per policy is the
remedy when it is not).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, EnvRunnerContext, State, StepContext
from kilorl.core import ParameterStore, Rollout, RolloutInfo
from kilorl.envs.groups import EnvGroups
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.heap import retain_freed_memory
from kilorl.roles.policy_copy import PolicyCopy
from kilorl.roles.step_record import FinalObservations, check_extras

if TYPE_CHECKING:
    from kilorl.config import Config

PolicyRollouts = dict[str, Rollout]
"""What an env runner of several policies collects: one rollout per policy, by policy name."""


@dataclass
class PolicyActor:
    """One policy on an env runner: the network it acts with, its copy of the published
    versions, its behaviour policy and that policy's per-column state."""

    model: torch.nn.Module
    copy: PolicyCopy
    behaviour: BehaviourPolicy
    state: State


class MultiPolicyEnvRunner(EnvRunner):
    """``EnvRunner`` whose agent columns act with several policies (one PettingZoo group).

    Shares the env runner's episode accounting and reward handling; builds its own models and
    step loop, since one model and one behaviour policy is what the base class is about."""

    def __init__(self, cfg: Config, store: ParameterStore, index: int, seed: int) -> None:  # noqa: D107
        torch.set_num_threads(cfg.train.torch_threads)
        retain_freed_memory(cfg.train.retain_freed_memory_mb)
        torch.manual_seed(seed)
        assert cfg.multi_agent is not None and cfg.multi_agent.several
        self.cfg, self.store, self.index = cfg, store, index
        env = cfg.env
        self.envs = EnvGroups(env.id, cfg.parallelism.envs_per_actor, 1, env.kwargs, env.max_episode_steps,
                              max_num_agents=env.max_num_agents, policy_mapping=cfg.multi_agent.policy_mapping,
                              critic_state=cfg.multi_agent.centralized_critic == "state")
        if self.envs.agents is None:
            self.envs.close()
            raise ValueError(f"multi_agent.policies: env.id {env.id!r} is not a PettingZoo ParallelEnv")
        self.agents = self.envs.agents
        self.views = cfg.policy_configs()
        self.names = list(self.views)
        """Policy names in ``multi_agent.policies`` order (a column's owner is an index into it)."""
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        columns = self.envs.num_envs
        self.parts: dict[str, PolicyActor] = {}
        for name, view in self.views.items():
            spec = get_algorithm(view.algo.name)
            self.cfg = view  # the base class's checks read the policy's sections
            self._check_agent_columns(self.agents, spec.alive_mask)
            model = spec.load("model")(obs_space, act_space, view.model)
            model.eval()
            copy = PolicyCopy(store, model, obs_space.shape, False, False, mode=cfg.sync.mode, groups=cfg.sync.groups,
                              max_staleness=cfg.sync.staleness(cfg.train.pipeline_depth), name=keys.published_name(name))
            ctx = EnvRunnerContext(index=index, num_env_runners=cfg.parallelism.actor, num_envs=columns,
                                   obs_space=obs_space, action_space=act_space, seed=seed,
                                   total_env_steps=cfg.train.total_env_steps, run_seed=cfg.train.seed)
            behaviour = spec.load("policy")(view.algo, ctx)
            self.parts[name] = PolicyActor(model, copy, behaviour, behaviour.initial_state(columns))
        self.cfg = cfg
        self.model = self.parts[self.names[0]].model  # the base class's record of action dtypes
        self.group_obs = self.envs.reset(seed=seed)
        self.discount = self.views[self.names[0]].algo.discount
        self.discounted = np.zeros(columns, np.float64)
        self.ep_return = np.zeros(columns, np.float64)
        self.ep_length = np.zeros(columns, np.int64)
        self._check_all_extras()

    @property
    def version(self) -> int:
        """The oldest version among the policies' copies."""
        return min(p.copy.version for p in self.parts.values())

    def versions(self) -> dict[str, int]:
        """Each policy's version now."""
        return {name: p.copy.version for name, p in self.parts.items()}

    def _check_all_extras(self) -> None:
        obs = torch.from_numpy(np.asarray(self.obs))
        for name, part in self.parts.items():
            state = {k: v.copy() for k, v in part.state.items()}
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                _, extras, _ = part.behaviour.act(part.model, obs, state, StepContext(0, part.copy.version, self.index))
            check_extras(f"{type(part.behaviour).__name__} (policy {name})", part.behaviour.extras, extras,
                         self.envs.num_envs)

    def owners(self) -> np.ndarray:
        """``[N]`` int: the index (in ``names``) of each column's policy now, -1 for a dead column."""
        policy_of = self.agents.agent_policy
        return np.array([-1 if a is None else self.names.index(policy_of[a]) for a in self.agents.column_agents()],
                        np.int64)

    # ---- rollout ------------------------------------------------------------------------
    def collect(self, min_version: int, env_steps: int = 0) -> tuple[PolicyRollouts, RolloutInfo]:  # type: ignore[override]
        """One rollout per policy of ``rollout_length`` steps, all policies acting together."""
        t_wait = time.perf_counter()
        for part in self.parts.values():
            part.copy.sync(min_version)
        wait_s = time.perf_counter() - t_wait
        t0 = time.perf_counter()
        T, N = self.cfg.algo.rollout_length, self.envs.num_envs
        steps = self._shared_steps(T, N)
        owner = np.full((T, N), -1, np.int64)
        extras = {name: {k: np.zeros((T, N, *e.shape), e.dtype) for k, e in p.behaviour.extras.items()}
                  for name, p in self.parts.items()}
        finals, episodes_r, episodes_l = FinalObservations(), [], []
        inference_s = env_step_s = 0.0
        copies = self.agents.num_copies
        for t in range(T):
            ctx_steps = env_steps + t * copies * self.cfg.parallelism.actor
            owner[t] = self.owners()
            steps[keys.ALIVE][t] = self.agents.alive
            obs = np.asarray(self.group_obs[0])
            steps[keys.OBS][t] = obs
            t_inf = time.perf_counter()
            actions = self._act(obs, owner[t], t, extras, ctx_steps)
            steps[keys.ACTIONS][t] = actions.numpy()
            t_env = time.perf_counter()
            self.envs.step_async(0, self.model.to_env_action(actions))
            self.group_obs[0], reward, terminated, truncated, info = self.envs.step_wait(0)
            inference_s += t_env - t_inf
            env_step_s += time.perf_counter() - t_env
            reward = np.asarray(reward, np.float64)
            done, _ = self._account(slice(0, N), reward, terminated, truncated, episodes_r, episodes_l)
            steps[keys.REWARDS][t] = self._scale(reward)
            steps[keys.TERMINATED][t], steps[keys.TRUNCATED][t] = terminated, truncated
            if done.any():
                idx = np.flatnonzero(done)
                finals.add(t, idx, np.stack([info["final_obs"][i] for i in idx]))
                for part in self.parts.values():
                    part.state = part.behaviour.reset(part.state, done)
        rollouts = self._policy_rollouts(steps, owner, extras, finals, env_steps)
        info_out = RolloutInfo(actor=self.index, version=self.version, env_steps=T * copies,
                               episode_returns=episodes_r, episode_lengths=episodes_l,
                               collect_s=time.perf_counter() - t0, wait_s=wait_s, env_step_s=env_step_s,
                               inference_s=inference_s)
        self._agent_episodes(info_out)
        return rollouts, info_out

    def _act(self, obs: np.ndarray, owner: np.ndarray, t: int, extras: dict[str, dict[str, np.ndarray]],
             env_steps: int) -> torch.Tensor:
        """Every policy acts on all columns; each column keeps its owner's action."""
        chosen: torch.Tensor | None = None
        obs_t = torch.from_numpy(obs)
        for p, (name, part) in enumerate(self.parts.items()):
            with torch.no_grad():
                actions, out, part.state = part.behaviour.act(part.model, obs_t, part.state,
                                                              StepContext(env_steps, part.copy.version, self.index))
            for k, v in out.items():
                extras[name][k][t] = v
            if chosen is None:
                chosen = actions.clone()
            else:
                mine = torch.from_numpy(owner == p)
                chosen[mine] = actions[mine]
        assert chosen is not None
        return chosen

    def _policy_rollouts(self, steps: dict[str, np.ndarray], owner: np.ndarray,
                         extras: dict[str, dict[str, np.ndarray]], finals: FinalObservations,
                         env_steps: int) -> PolicyRollouts:
        """The shared record cut per policy: its extras, and alive only where its agents acted."""
        last_obs = np.asarray(self.obs)
        out: PolicyRollouts = {}
        for p, (name, part) in enumerate(self.parts.items()):
            final, last = finals.record(part.behaviour, part.model, last_obs, part.state)
            own = {**steps, **extras[name], keys.ALIVE: steps[keys.ALIVE] & (owner == p)}
            version = part.copy.version
            out[name] = Rollout(steps=own, last=last, final=final, version=version, env_steps_before=env_steps,
                                column_versions=np.full(owner.shape[1], version, np.int64))
        return out

    def _shared_steps(self, T: int, N: int) -> dict[str, np.ndarray]:
        """The arrays every policy's rollout shares: observations, actions, rewards, ends, alive."""
        space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        return {
            keys.ALIVE: np.zeros((T, N), bool),
            keys.OBS: np.zeros((T, N, *space.shape), space.dtype),
            keys.ACTIONS: np.zeros((T, N, *act_space.shape), np.int64 if self.model.discrete else np.float32),
            keys.REWARDS: np.zeros((T, N), np.float32),
            keys.TERMINATED: np.zeros((T, N), bool),
            keys.TRUNCATED: np.zeros((T, N), bool),
        }
