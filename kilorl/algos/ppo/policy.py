"""PPO's behaviour policy: samples from the model; records V(s) and the action's log-prob."""

from __future__ import annotations

from kilorl.algos.actor_critic import ActorCriticPolicy


class PPOPolicy(ActorCriticPolicy):
    """PPO's ratio needs the behaviour policy's log-prob; GAE and value clipping need V(s)."""

    with_logp = True
