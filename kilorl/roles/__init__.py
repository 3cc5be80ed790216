"""Roles: processes with a lifecycle (actor, learner, parameter server)."""
