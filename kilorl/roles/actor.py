"""The rollout actor: vectorized environments stepped with a local policy copy."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from kilorl.core import Actor, ParameterStore
from kilorl.envs import make_vector_env
from kilorl.envs.normalization import Moments, normalize
from kilorl.models import build_actor_critic

POLICY = "policy"
"""Name under which the learner publishes weights in the parameter store."""


class RolloutWorker(Actor):
    """Collects ``rollout_length`` steps from ``envs_per_actor`` environments per call.

    Plain Python; the trainer wraps it in a Ray actor. Parameters come from the
    parameter store (only the tensors this actor's layout needs); raw observation and
    return moments go back with the batch so the learner can merge normalizer stats.
    """

    def __init__(self, cfg: Any, store: ParameterStore, index: int, seed: int) -> None:
        torch.set_num_threads(cfg.train.torch_threads)
        torch.manual_seed(seed)
        self.cfg, self.store, self.index = cfg, store, index
        env = cfg.env
        self.envs = make_vector_env(
            env.id, cfg.parallelism.envs_per_actor, env.kwargs, env.max_episode_steps,
            asynchronous=cfg.parallelism.vector_env == "async",
        )
        self.model = build_actor_critic(self.envs.single_observation_space, self.envs.single_action_space, cfg.model)
        self.model.eval()
        self.layout = [f"model/{k}" for k in self.model.state_dict()]
        if env.normalize_obs:
            self.layout += ["obs_rms/mean", "obs_rms/var"]
        if env.normalize_reward:
            self.layout += ["ret_rms/var"]
        self.version = -1
        self.obs_mean = np.zeros(self.envs.single_observation_space.shape, np.float32)
        self.obs_var = np.ones_like(self.obs_mean)
        self.ret_var = 1.0
        self.obs, _ = self.envs.reset(seed=seed)
        n = cfg.parallelism.envs_per_actor
        self.discounted = np.zeros(n, np.float64)
        self.ep_return = np.zeros(n, np.float64)
        self.ep_length = np.zeros(n, np.int64)

    def ready(self) -> int:
        """Returns once the process is up and its environments are built (start-up barrier)."""
        return self.index

    # ---- parameters ---------------------------------------------------------------------
    def _sync(self, min_version: int, timeout: float = 600.0) -> float:
        """Take the newest version >= ``min_version``; returns seconds spent waiting."""
        t0 = time.perf_counter()
        latest = self.store.wait(POLICY, min_version, timeout)
        if latest != self.version:
            version, tensors = self.store.fetch(POLICY, latest, self.layout)
            state = {k.removeprefix("model/"): torch.tensor(np.asarray(v)) for k, v in tensors.items() if k.startswith("model/")}
            self.model.load_state_dict(state)
            if self.cfg.env.normalize_obs:
                self.obs_mean, self.obs_var = np.asarray(tensors["obs_rms/mean"]), np.asarray(tensors["obs_rms/var"])
            if self.cfg.env.normalize_reward:
                self.ret_var = float(np.asarray(tensors["ret_rms/var"]).reshape(-1)[0])
            self.version = version
        return time.perf_counter() - t0

    def _norm_obs(self, obs: np.ndarray) -> np.ndarray:
        if not self.cfg.env.normalize_obs:
            return obs.astype(np.float32, copy=False)
        return normalize(obs, self.obs_mean, self.obs_var, self.cfg.env.clip_obs)

    # ---- rollout ------------------------------------------------------------------------
    def collect(self, min_version: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        wait_s = self._sync(min_version)
        t0 = time.perf_counter()
        cfg, algo = self.cfg, self.cfg.algo
        T, N = algo.rollout_length, cfg.parallelism.envs_per_actor
        obs_shape = self.envs.single_observation_space.shape
        act_space = self.envs.single_action_space
        obs_buf = np.zeros((T, N, *obs_shape), np.float32)
        raw_obs = np.zeros((T, N, *obs_shape), np.float64)
        act_buf = np.zeros((T, N, *act_space.shape), np.int64 if self.model.discrete else np.float32)
        logp_buf = np.zeros((T, N), np.float32)
        val_buf = np.zeros((T, N), np.float32)
        rew_buf = np.zeros((T, N), np.float32)
        done_buf = np.zeros((T, N), np.float32)
        raw_returns = np.zeros((T, N), np.float64)
        episodes_r: list[float] = []
        episodes_l: list[int] = []
        gamma = algo.gamma
        for t in range(T):
            raw_obs[t] = self.obs
            obs_n = self._norm_obs(self.obs)
            obs_buf[t] = obs_n
            actions, logp, values = self.model.act(torch.from_numpy(obs_n))
            act_buf[t] = actions.numpy()
            logp_buf[t] = logp.numpy()
            val_buf[t] = values.numpy()
            self.obs, reward, terminated, truncated, info = self.envs.step(self.model.to_env_action(actions))
            reward = np.asarray(reward, np.float64)
            done = np.logical_or(terminated, truncated)
            self.ep_return += reward
            self.ep_length += 1
            self.discounted = self.discounted * gamma + reward
            raw_returns[t] = self.discounted
            if cfg.env.normalize_reward:
                scaled = np.clip(reward / np.sqrt(self.ret_var + 1e-8), -cfg.env.clip_reward, cfg.env.clip_reward)
            else:
                scaled = reward
            scaled = scaled.astype(np.float32)
            # A time-limit truncation is not a terminal state: bootstrap its value.
            bootstrap = np.logical_and(truncated, np.logical_not(terminated))
            if bootstrap.any():
                final = np.stack([info["final_obs"][i] for i in np.flatnonzero(bootstrap)])
                with torch.no_grad():
                    v_final = self.model.value(torch.from_numpy(self._norm_obs(final))).numpy()
                scaled[bootstrap] += gamma * v_final
            rew_buf[t] = scaled
            done_buf[t] = done
            if done.any():
                for i in np.flatnonzero(done):
                    episodes_r.append(float(self.ep_return[i]))
                    episodes_l.append(int(self.ep_length[i]))
                self.ep_return[done] = 0.0
                self.ep_length[done] = 0
                self.discounted[done] = 0.0
        with torch.no_grad():
            last_values = self.model.value(torch.from_numpy(self._norm_obs(self.obs))).numpy()
        obs_m = Moments.of(raw_obs, obs_shape)
        ret_m = Moments.of(raw_returns)
        batch = {
            "obs": obs_buf, "actions": act_buf, "logp": logp_buf, "values": val_buf,
            "rewards": rew_buf, "dones": done_buf, "last_values": last_values.astype(np.float32),
            "obs_moments_mean": obs_m.mean[None].astype(np.float32), "obs_moments_var": obs_m.var[None].astype(np.float32),
            "obs_moments_count": np.array([obs_m.count]),
            "ret_moments_mean": np.array([ret_m.mean], np.float32).reshape(1, 1),
            "ret_moments_var": np.array([ret_m.var], np.float32).reshape(1, 1),
            "ret_moments_count": np.array([ret_m.count]),
        }
        info_out = {
            "actor": self.index, "version": self.version, "env_steps": T * N,
            "episode_returns": episodes_r, "episode_lengths": episodes_l,
            "collect_s": time.perf_counter() - t0, "wait_s": wait_s,
        }
        return batch, info_out

    def close(self) -> None:
        self.envs.close()
