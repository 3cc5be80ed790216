"""The rollout actor: vectorized environments stepped with a local policy copy.

Generic over algorithms: the algorithm's ``StepRecorder`` says what to keep per step;
everything else (parameters, normalization, episode accounting, truncation bootstrap)
is the same for every on-policy algorithm. Rollouts stay ``[T, N, ...]``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.algos import keys
from kilorl.core import Actor, ParameterStore, Rollout, RolloutInfo
from kilorl.envs import make_vector_env
from kilorl.envs.normalization import Moments, normalize
from kilorl.roles.heap import retain_freed_memory
from kilorl.roles.sync_groups import SyncGroups
from kilorl.store.client.board_reads import MAX_COPY

if TYPE_CHECKING:
    from kilorl.config import Config


COPY_IN_MAX_BYTES = MAX_COPY
"""Up to this size an actor copies each version into the model it keeps (``fetch_into``);
larger, its model takes the store's memory as views (``fetch(share=True)``). Below it, a
read on the node is a private copy from the worker's version board anyway, and copying
that into the same tensors every time costs less than new tensors and ``load_state_dict``:
10K parameters, 4 actors, 2 cores, p50 publish -> in the model 0.43 ms copied in against
0.54 ms as views (``benchmarks/param_sync_bench.py --runs 6``, both ways in every run)."""


class RolloutWorker(Actor):
    """Collects ``rollout_length`` steps from ``envs_per_actor`` environments per call.

    Plain Python; the trainer wraps it in a Ray actor. Parameters come from the
    parameter store (only the tensors this actor's layout needs); raw observation and
    return moments go back with the rollout so the learner can merge normalizer stats.
    """

    def __init__(self, cfg: Config, store: ParameterStore, index: int, seed: int) -> None:
        torch.set_num_threads(cfg.train.torch_threads)
        retain_freed_memory(cfg.train.retain_freed_memory_mb)
        torch.manual_seed(seed)
        self.cfg, self.store, self.index = cfg, store, index
        spec = get_algorithm(cfg.algo.name)
        self.recorder = spec.load("recorder")()
        env = cfg.env
        self.envs = make_vector_env(
            env.id, cfg.parallelism.envs_per_actor, env.kwargs, env.max_episode_steps,
            asynchronous=cfg.parallelism.vector_env == "async",
        )
        self.model = spec.load("model")(self.envs.single_observation_space, self.envs.single_action_space, cfg.model)
        self.model.eval()
        self.layout = keys.actor_layout(list(self.model.state_dict()), env.normalize_obs, env.normalize_reward)
        self.version = -1
        sync = cfg.sync
        self.groups = SyncGroups(self.layout, sync.mode, sync.groups, sync.staleness(cfg.train.pipeline_depth))
        self.obs_mean = np.zeros(self.envs.single_observation_space.shape, np.float32)
        self.obs_var = np.ones_like(self.obs_mean)
        self.ret_var = np.ones((), np.float32)
        self._into: dict[str, torch.Tensor] | None = self._destinations()
        if sum(t.nbytes for t in self._into.values()) > COPY_IN_MAX_BYTES:
            self._into = None  # large: taking the store's memory as views copies nothing at all
        if keys.OBS_RMS + "mean" in self._into:  # the statistics live in the tensors fetch_into fills
            self.obs_mean, self.obs_var = (self._into[keys.OBS_RMS + k].numpy() for k in ("mean", "var"))
        if keys.RET_RMS + "var" in self._into:
            self.ret_var = self._into[keys.RET_RMS + "var"].numpy()
        self.obs, _ = self.envs.reset(seed=seed)
        n = cfg.parallelism.envs_per_actor
        self.discounted = np.zeros(n, np.float64)
        self.ep_return = np.zeros(n, np.float64)
        self.ep_length = np.zeros(n, np.int64)

    def ready(self) -> int:
        return self.index

    # ---- parameters ---------------------------------------------------------------------
    def _sync(self, min_version: int, timeout: float = 600.0) -> float:
        """Take the newest version >= ``min_version``; returns seconds spent waiting."""
        t0 = time.perf_counter()
        latest = self.store.wait(keys.POLICY, min_version, timeout)
        if latest != self.version:
            # The newest version (>= latest): a store may already have reclaimed ``latest``.
            wanted = self.groups.wanted(latest)
            version = self._copy_in(wanted) if self._into is not None else None
            if version is None:
                version = self._load(wanted)
            self.groups.took(version, wanted)
            self.version = version
        return time.perf_counter() - t0

    def _copy_in(self, wanted: list[str]) -> int | None:
        """The newest version copied straight into the model's own tensors and the normalizer
        statistics (``fetch_into``: no new tensors, no ``load_state_dict``); None, and never
        again, when they cannot hold it (the published tensors differ from the model's)."""
        try:
            return self.store.fetch_into(keys.POLICY, self._into, None, wanted)
        except ValueError:  # LayoutError from the store's own copy, or the generic one's
            self._into = None
            return None

    def _load(self, wanted: list[str]) -> int:
        # share: on the node the weights are views of the store's memory, and the model takes
        # them as they are (assign): no copy at all.
        version, tensors = self.store.fetch(keys.POLICY, None, wanted, share=True)
        state = {k.removeprefix(keys.MODEL): torch.as_tensor(np.asarray(v)) for k, v in tensors.items()
                 if k.startswith(keys.MODEL)}
        self.model.load_state_dict(state, strict=len(wanted) == len(self.layout), assign=True)
        if keys.OBS_RMS + "mean" in tensors:
            self.obs_mean = np.array(tensors[keys.OBS_RMS + "mean"])
            self.obs_var = np.array(tensors[keys.OBS_RMS + "var"])
        if keys.RET_RMS + "var" in tensors:
            self.ret_var[...] = float(np.asarray(tensors[keys.RET_RMS + "var"]).reshape(-1)[0])
        return version

    def _destinations(self) -> dict[str, torch.Tensor]:
        """What ``fetch_into`` copies each version into: the model's parameters and buffers,
        and the normalizer statistics the actor applies (``obs_mean``, ``obs_var``,
        ``ret_var`` are numpy views of them), in the dtypes and shapes the learner publishes."""
        into = {keys.MODEL + k: t for k, t in self.model.state_dict(keep_vars=True).items()}
        stats = {keys.OBS_RMS + "mean": torch.zeros(self.obs_mean.shape), keys.OBS_RMS + "var": torch.ones(self.obs_mean.shape),
                 keys.RET_RMS + "var": torch.ones(())}
        into.update({k: v for k, v in stats.items() if k in self.layout})
        return into

    def _norm_obs(self, obs: np.ndarray) -> np.ndarray:
        if not self.cfg.env.normalize_obs:
            return obs.astype(np.float32, copy=False)
        return normalize(obs, self.obs_mean, self.obs_var, self.cfg.env.clip_obs)

    def _scale(self, reward: np.ndarray) -> np.ndarray:
        env = self.cfg.env
        if env.normalize_reward:
            reward = np.clip(reward / np.sqrt(float(self.ret_var) + 1e-8), -env.clip_reward, env.clip_reward)  # in float64
        return reward.astype(np.float32)

    # ---- rollout ------------------------------------------------------------------------
    def collect(self, min_version: int) -> tuple[Rollout, RolloutInfo]:
        wait_s = self._sync(min_version)
        t0 = time.perf_counter()
        T, N = self.cfg.algo.rollout_length, self.cfg.parallelism.envs_per_actor
        obs_shape = self.envs.single_observation_space.shape
        act_space = self.envs.single_action_space
        steps = {
            keys.OBS: np.zeros((T, N, *obs_shape), np.float32),
            keys.ACTIONS: np.zeros((T, N, *act_space.shape), np.int64 if self.model.discrete else np.float32),
            keys.REWARDS: np.zeros((T, N), np.float32),
            keys.DONES: np.zeros((T, N), np.float32),
            **{k: np.zeros((T, N), np.float32) for k in self.recorder.fields},
        }
        raw_obs = np.zeros((T, N, *obs_shape), np.float64)
        raw_returns = np.zeros((T, N), np.float64)
        episodes_r: list[float] = []
        episodes_l: list[int] = []
        for t in range(T):
            raw_obs[t] = self.obs
            obs_n = self._norm_obs(self.obs)
            steps[keys.OBS][t] = obs_n
            with torch.no_grad():
                actions, record = self.recorder.act(self.model, torch.from_numpy(obs_n))
            steps[keys.ACTIONS][t] = actions.numpy()
            for k, v in record.items():
                steps[k][t] = v
            self.obs, reward, terminated, truncated, info = self.envs.step(self.model.to_env_action(actions))
            done, raw_returns[t] = self._account(np.asarray(reward, np.float64), terminated, truncated,
                                                 episodes_r, episodes_l)
            steps[keys.REWARDS][t] = self._bootstrapped(reward, terminated, truncated, info)
            steps[keys.DONES][t] = done
        last_values = self.recorder.value(self.model, torch.from_numpy(self._norm_obs(self.obs)))
        rollout = Rollout(
            steps=steps,
            last={} if last_values is None else {keys.LAST_VALUES: last_values.astype(np.float32)},
            moments={keys.OBS_MOMENTS: [Moments.of(raw_obs, obs_shape)], keys.RET_MOMENTS: [Moments.of(raw_returns)]},
            version=self.version,
        )
        info_out = RolloutInfo(
            actor=self.index, version=self.version, env_steps=T * N, episode_returns=episodes_r,
            episode_lengths=episodes_l, collect_s=time.perf_counter() - t0, wait_s=wait_s,
        )
        return rollout, info_out

    def _account(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 episodes_r: list[float], episodes_l: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Episode returns/lengths; returns ``done`` and the discounted return (for reward scaling)."""
        done = np.logical_or(terminated, truncated)
        self.ep_return += reward
        self.ep_length += 1
        self.discounted = self.discounted * self.cfg.algo.gamma + reward
        discounted = self.discounted.copy()
        for i in np.flatnonzero(done):
            episodes_r.append(float(self.ep_return[i]))
            episodes_l.append(int(self.ep_length[i]))
        self.ep_return[done] = 0.0
        self.ep_length[done] = 0
        self.discounted[done] = 0.0
        return done, discounted

    def _bootstrapped(self, reward: Any, terminated: np.ndarray, truncated: np.ndarray, info: dict) -> np.ndarray:
        """Scaled reward; a time-limit truncation is not terminal, so its value is folded in."""
        scaled = self._scale(np.asarray(reward, np.float64))
        bootstrap = np.logical_and(truncated, np.logical_not(terminated))
        if bootstrap.any():
            final = np.stack([info["final_obs"][i] for i in np.flatnonzero(bootstrap)])
            v_final = self.recorder.value(self.model, torch.from_numpy(self._norm_obs(final)))
            if v_final is not None:
                scaled[bootstrap] += self.cfg.algo.gamma * v_final
        return scaled

    def close(self) -> None:
        self.envs.close()
