"""SAC's behaviour policy: uniformly random ``[-1, 1]`` actions until ``learning_starts``, then
samples of the squashed Gaussian.

Its draws come from generators seeded by (run seed, runner index, run env steps at the step),
as DQN's do, so a run repeats exactly, across a resume too, wherever the driver's step clock
does (``train.pipeline_depth: 0``).
"""

from __future__ import annotations

import numpy as np
import torch

from kilorl.algos.api import BehaviourPolicy, EnvRunnerContext, State, StepContext
from kilorl.algos.sac.config import SACConfig


class SquashedGaussianPolicy(BehaviourPolicy):
    """Acts with the policy's samples; records nothing beyond the step record."""

    extras = {}

    def __init__(self, algo_cfg: SACConfig, ctx: EnvRunnerContext) -> None:
        super().__init__(algo_cfg, ctx)
        self.act_dim = int(np.prod(ctx.action_space.shape))

    def act(self, model: torch.nn.Module, obs: torch.Tensor, state: State,
            ctx: StepContext) -> tuple[torch.Tensor, dict[str, np.ndarray], State]:
        key = [self.ctx.run_seed, self.ctx.index, ctx.env_steps]
        if ctx.env_steps < self.algo_cfg.learning_starts:
            rng = np.random.default_rng(key)
            return torch.from_numpy(rng.uniform(-1.0, 1.0, (obs.shape[0], self.act_dim)).astype(np.float32)), {}, state
        generator = torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))
        actions, _ = model.sample(obs, generator)
        return actions, {}, state
