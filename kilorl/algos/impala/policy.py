"""IMPALA's behaviour policy: samples from the model, records the behaviour log-prob that
V-trace's importance weights divide by (values are the learner's own)."""

from __future__ import annotations

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, Extra, State, StepContext


class BehaviourLogProb(BehaviourPolicy):
    extras = {keys.LOGP: Extra()}

    def act(self, model: torch.nn.Module, obs: torch.Tensor, state: State,
            ctx: StepContext) -> tuple[torch.Tensor, dict[str, np.ndarray], State]:
        actions, logp, _ = model.act(obs)
        return actions, {keys.LOGP: logp.numpy()}, state
