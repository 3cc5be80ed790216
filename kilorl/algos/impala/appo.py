"""APPO: IMPALA's data path and V-trace, with PPO's clipped surrogate as the policy loss
(the ratio against the behaviour policy clipped to ``1 +- clip_coef``) and an optional KL
penalty towards it."""

from __future__ import annotations

import torch

from kilorl.algos.impala.learner import IMPALALearner


class APPOLearner(IMPALALearner):
    def policy_loss(self, logp: torch.Tensor, behaviour_logp: torch.Tensor,
                    adv: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        log_ratio = logp - behaviour_logp
        ratio = log_ratio.exp()
        clip = self.algo.clip_coef
        surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
        approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's k3 estimator of KL(mu || pi)
        loss = -surrogate.mean() + self.algo.kl_coef * approx_kl
        clipped = ((ratio - 1).abs() > clip).float().mean()
        return loss, {"approx_kl": float(approx_kl.detach()), "clip_fraction": float(clipped)}
