"""Policy and value networks."""

from kilorl.models.actor_critic import ActorCritic
from kilorl.models.builder import build_actor_critic
from kilorl.models.recurrent import RecurrentActorCritic

__all__ = ["ActorCritic", "RecurrentActorCritic", "build_actor_critic"]
