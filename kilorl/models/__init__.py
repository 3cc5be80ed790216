"""Policy and value networks."""

from kilorl.models.actor_critic import ActorCritic, build_actor_critic

__all__ = ["ActorCritic", "build_actor_critic"]
