"""A2C's update: one gradient step per rollout on the advantage-weighted log-likelihood.

It exists to prove the seam: a second algorithm, in its own folder, trained by the same
trainer and roles with no change to either.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

from kilorl.algos import keys
from kilorl.algos.actor_critic import ActorCriticLearner, ActorCriticState, adam, explained_variance, rmsprop
from kilorl.algos.gae import rollout_gae
from kilorl.algos.sequences import flat_rows, rollout_forward

if TYPE_CHECKING:
    from kilorl.algos.a2c.config import A2CConfig
    from kilorl.algos.api import LearnerContext, RolloutBatch


class A2CLearner(ActorCriticLearner):
    """Policy loss -A log pi(a|s), value loss (V - R)^2, entropy bonus; one step per rollout."""

    def __init__(self, algo: A2CConfig, ctx: LearnerContext) -> None:
        self.algo, self.ctx = algo, ctx
        make_opt = rmsprop if algo.optimizer == "rmsprop" else adam
        self.ac = ActorCriticState(algo, ctx, make_opt)

    @property
    def model(self) -> torch.nn.Module:
        return self.ac.model

    def update(self, source: RolloutBatch, env_steps_total: int) -> dict[str, float]:
        rollout = source.rollout()
        ac, algo, steps = self.ac, self.algo, rollout.steps
        ac.merge_moments(rollout)
        adv, ret = rollout_gae(rollout, algo.gamma, algo.gae_lambda)
        obs, actions = ac.observations(steps[keys.OBS]), ac.tensor(steps[keys.ACTIONS])
        advantages = torch.as_tensor(adv.reshape(-1), device=ac.device)
        returns = torch.as_tensor(ret.reshape(-1), device=ac.device)
        if algo.norm_adv and advantages.numel() > 1:  # over every rank's share of the batch
            advantages = ac.normalized(advantages)
        lr = ac.set_lr(env_steps_total)
        micro = max(1, self.ctx.gradient_accumulation_steps)
        if getattr(ac.model, "recurrent", False):  # micro-batches of whole env columns, from the saved state
            T, N = rollout.shape
            columns = list(torch.arange(N, device=ac.device).chunk(micro))
            parts = [flat_rows(c, T, N) for c in columns]
            sequence = rollout_forward(ac, rollout, obs, actions)

            def forward(i: int) -> tuple[torch.Tensor, ...]:
                return sequence(columns[i])
        else:
            parts = list(torch.arange(advantages.numel(), device=ac.device).chunk(micro))

            def forward(i: int) -> tuple[torch.Tensor, ...]:
                return ac.module.evaluate_actions(obs[parts[i]], actions[parts[i]])
        ac.optimizer.zero_grad(set_to_none=True)
        totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
        for i, part in enumerate(parts):
            quiet = ac.grad_comm.no_sync() if i < len(parts) - 1 else contextlib.nullcontext()
            with quiet:
                with ac.autocast():
                    logp, entropy, values = forward(i)
                policy = -(advantages[part] * logp).mean()
                value = 0.5 * ((returns[part] - values) ** 2).mean()
                ent = entropy.mean()
                share = len(part) / advantages.numel()  # a part's share of the batch mean
                ((policy + algo.vf_coef * value - algo.ent_coef * ent) * share).backward()
            for k, v in (("policy_loss", policy), ("value_loss", value), ("entropy", ent)):
                totals[k] += float(v.detach()) * share
        grad_norm = ac.step()
        ac.updates += 1
        return {**totals, "lr": lr, "grad_norm": float(grad_norm),
                "explained_variance": explained_variance(ret, steps[keys.VALUES])}
