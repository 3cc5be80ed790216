"""Whole episodes with a policy state: what ``kilorl eval`` and evaluation during training share.

A state is what an algorithm's ``state()`` returns and a checkpoint holds: the model's
``state_dict`` and the observation normalizer's statistics. The model is what the
algorithm's spec builds, and it is driven through the policy protocol every model declares
(``policy(obs, deterministic) -> actions``, ``to_env_action(actions)``; docs/architecture.md); a recurrent
model is stepped with its state instead (``act(obs, state, deterministic=...)``), one row per
episode, started at zero. Each episode starts from its
own seed (``seed + k``), so two evaluations of one policy with one seed see the same
episodes, and one run's choice of policy (``evaluation`` in the config) can be made on
other episodes than the ones ``kilorl eval`` later judges it by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kilorl.algos import get as get_algorithm
from kilorl.envs import make_env
from kilorl.envs.normalization import normalize

if TYPE_CHECKING:
    from kilorl.config import Config


class EpisodeRunner:
    """Environments and one model of the run's algorithm, reused for every evaluation.

    The episodes of one evaluation are played side by side, one batched forward pass per
    step: a CartPole evaluation of 20 episodes of 500 steps then takes 500 forward passes,
    not 10,000, which is what makes evaluating during training cheap enough to do often.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.envs: list[Any] = []
        probe = self._env(0)
        with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten: draw them from no one's stream
            self.model = get_algorithm(cfg.algo.name).load("model")(probe.observation_space, probe.action_space,
                                                                    cfg.model)
        self.model.eval()

    def _env(self, k: int) -> Any:
        while len(self.envs) <= k:
            env_cfg = self.cfg.env
            self.envs.append(make_env(env_cfg.id, env_cfg.kwargs, env_cfg.max_episode_steps))
        return self.envs[k]

    def returns(self, state: dict[str, Any], episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        """The return of each of ``episodes`` episodes played with ``state``'s policy.

        Sampling (``deterministic=False``) draws from a forked torch RNG, so evaluating
        inside a learner leaves the learner's own random stream where it was.
        """
        self.model.load_state_dict(state["model"])
        envs = [self._env(k) for k in range(episodes)]
        obs = [env.reset(seed=seed + k)[0] for k, env in enumerate(envs)]
        totals = [0.0] * episodes
        live = list(range(episodes))
        recurrent = getattr(self.model, "recurrent", False)
        memory = self.model.initial_state(episodes) if recurrent else {}  # one row per episode, kept across steps
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            while live:
                batch = torch.from_numpy(np.stack([self._observe(obs[k], state) for k in live]))
                if recurrent:
                    rows = torch.tensor(live)
                    action, _, _, new = self.model.act(batch, {n: v[rows] for n, v in memory.items()},
                                                       deterministic=deterministic)
                    for n, v in new.items():
                        memory[n][rows] = v
                else:
                    action = self.model.policy(batch, deterministic)
                still = []
                for k, a in zip(live, self.model.to_env_action(action), strict=True):
                    obs[k], reward, terminated, truncated, _ = envs[k].step(a)
                    totals[k] += float(reward)
                    if not (terminated or truncated):
                        still.append(k)
                live = still
        return totals

    def _observe(self, obs: Any, state: dict[str, Any]) -> np.ndarray:
        env_cfg = self.cfg.env
        if not env_cfg.normalize_obs:
            return np.asarray(obs)
        return normalize(obs, state["obs_rms"]["mean"], state["obs_rms"]["var"], env_cfg.clip_obs)

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs.clear()
