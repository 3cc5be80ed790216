"""A2C's behaviour policy: samples from the model; records V(s) only (the log-prob is
recomputed in the update)."""

from __future__ import annotations

from kilorl.algos.actor_critic import ActorCriticPolicy


class A2CPolicy(ActorCriticPolicy):
    with_logp = False
