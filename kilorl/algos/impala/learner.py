"""IMPALA's update: one gradient step per batch of lagged rollouts, V-trace corrected.

Values are the learner's own, of every observation, every finished episode's final
observation and s_T, in one forward pass; V-trace (``kilorl.algos.vtrace``) turns them and the
behaviour log-probs into value targets and policy-gradient advantages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kilorl.algos import keys
from kilorl.algos.actor_critic import ActorCriticLearner, ActorCriticState, adam, rmsprop
from kilorl.algos.vtrace import vtrace

if TYPE_CHECKING:
    from kilorl.algos.api import LearnerContext, RolloutBatch
    from kilorl.algos.impala.config import IMPALAConfig


class IMPALALearner(ActorCriticLearner):
    def __init__(self, algo: IMPALAConfig, ctx: LearnerContext) -> None:
        self.algo, self.ctx = algo, ctx
        self.ac = ActorCriticState(algo, ctx, rmsprop if algo.optimizer == "rmsprop" else adam)

    @property
    def model(self) -> torch.nn.Module:
        return self.ac.model

    def update(self, source: RolloutBatch, env_steps_total: int) -> dict[str, float]:
        rollout = source.rollout()
        ac, algo, steps = self.ac, self.algo, rollout.steps
        ac.merge_moments(rollout)
        T, N = rollout.shape
        obs, actions = ac.observations(steps[keys.OBS]), ac.tensor(steps[keys.ACTIONS])
        final_obs = ac.observations(rollout.final[keys.OBS][None]) if len(rollout.final[keys.FINAL_T]) else obs[:0]
        last_obs = ac.observations(rollout.last[keys.OBS][None])
        lr = ac.set_lr(env_steps_total)
        ac.optimizer.zero_grad(set_to_none=True)
        with ac.autocast():
            logp, entropy, values = ac.module.evaluate_actions(obs, actions)
            with torch.no_grad():
                extra_v = ac.model.value(torch.cat([final_obs, last_obs]))
        k = len(final_obs)
        v = values.reshape(T, N)
        next_v = torch.cat([v.detach()[1:], extra_v[k:][None]])  # the next row's value, V(s_T) after the last
        if k:
            t_idx = torch.as_tensor(rollout.final[keys.FINAL_T], device=ac.device)
            e_idx = torch.as_tensor(rollout.final[keys.FINAL_ENV], device=ac.device)
            next_v[t_idx, e_idx] = extra_v[:k]  # a finished episode: its real final observation's value
        term = torch.as_tensor(steps[keys.TERMINATED], device=ac.device)
        done = term | torch.as_tensor(steps[keys.TRUNCATED], device=ac.device)
        vt = vtrace(ac.tensor(steps[keys.LOGP]).reshape(T, N), logp.detach().reshape(T, N),
                    ac.tensor(steps[keys.REWARDS]).reshape(T, N), v.detach(), next_v, term, done, algo.gamma,
                    algo.rho_bar, algo.c_bar, algo.vtrace_lambda)
        adv = vt.pg_advantages.reshape(-1)
        if algo.norm_adv:
            adv = ac.normalized(adv)
        policy, extra = self.policy_loss(logp, ac.tensor(steps[keys.LOGP]), adv)
        value = 0.5 * ((vt.vs.reshape(-1) - values) ** 2).mean()
        ent = entropy.mean()
        (policy + algo.vf_coef * value - algo.ent_coef * ent).backward()
        grad_norm = ac.step()
        ac.updates += 1
        lag = (rollout.column_versions is not None)
        return {"policy_loss": float(policy.detach()), "value_loss": float(value.detach()),
                "entropy": float(ent.detach()), "lr": lr,
                "grad_norm": float(grad_norm), "mean_rho": float((logp.detach() - ac.tensor(steps[keys.LOGP])).exp().mean()),
                **extra, **({"batch_columns": float(len(rollout.column_versions))} if lag else {})}

    def policy_loss(self, logp: torch.Tensor, behaviour_logp: torch.Tensor,
                    adv: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """IMPALA's policy gradient on the V-trace advantages (which carry the importance weights)."""
        return -(adv * logp).mean(), {}
