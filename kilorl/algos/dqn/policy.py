"""DQN's behaviour policy: epsilon-greedy over the Q network.

Epsilon follows SB3's linear schedule over the run's env steps (random actions until
``learning_starts``), or Ape-X's fixed epsilon per env runner. Its random draws come from a
generator seeded by (run seed, runner index, run env steps at the step), so a run repeats
exactly, across a resume too, wherever the driver's step clock does
(``train.pipeline_depth: 0``).
"""

from __future__ import annotations

import numpy as np
import torch

from kilorl.algos.api import BehaviourPolicy, EnvRunnerContext, State, StepContext
from kilorl.algos.dqn.config import DQNConfig


def linear_epsilon(cfg: DQNConfig, env_steps: int, total_env_steps: int) -> float:
    """SB3's ``get_linear_fn``: initial -> final over ``exploration_fraction`` of the run."""
    progress = min(1.0, env_steps / max(1.0, cfg.exploration_fraction * total_env_steps))
    return cfg.exploration_initial_eps + progress * (cfg.exploration_final_eps - cfg.exploration_initial_eps)


def ape_x_epsilon(cfg: DQNConfig, index: int, num_env_runners: int) -> float:
    """Ape-X: ``base ** (1 + alpha * i / (N - 1))`` (runner 0 explores most)."""
    share = index / (num_env_runners - 1) if num_env_runners > 1 else 0.0
    return cfg.ape_x.base ** (1.0 + cfg.ape_x.alpha * share)


class EpsilonGreedy(BehaviourPolicy):
    """Greedy on Q with probability ``1 - epsilon``, uniformly random otherwise."""

    extras = {}

    def __init__(self, algo_cfg: DQNConfig, ctx: EnvRunnerContext) -> None:
        super().__init__(algo_cfg, ctx)
        self.n_actions = int(ctx.action_space.n)

    def epsilon(self, env_steps: int) -> float:
        cfg = self.algo_cfg
        if env_steps < cfg.learning_starts:
            return 1.0
        if cfg.exploration == "ape_x":
            return ape_x_epsilon(cfg, self.ctx.index, self.ctx.num_env_runners)
        return linear_epsilon(cfg, env_steps, self.ctx.total_env_steps)

    def act(self, model: torch.nn.Module, obs: torch.Tensor, state: State,
            ctx: StepContext) -> tuple[torch.Tensor, dict[str, np.ndarray], State]:
        n = obs.shape[0]
        eps = self.epsilon(ctx.env_steps)
        rng = np.random.default_rng([self.ctx.run_seed, self.ctx.index, ctx.env_steps])
        explore = rng.random(n) < eps
        random_actions = rng.integers(0, self.n_actions, size=n)
        if explore.all():
            return torch.from_numpy(random_actions), {}, state
        greedy = model(obs).argmax(-1).numpy()
        return torch.from_numpy(np.where(explore, random_actions, greedy)), {}, state
