"""Names shared by actor-critic algorithms: published weights and rollout arrays.

One place for them (docs/architecture.md, "Contracts"): the learner publishes under these
names, the actor's layout asks for them, the rollout carries them.
"""

from __future__ import annotations

POLICY = "policy"
"""Name under which learners publish weights in the parameter store (a run of one policy)."""


def published_name(policy: str | None) -> str:
    """The name a policy's versions are published under: ``policy`` for a run's one policy
    (None), ``policy/<name>`` for each of several (``multi_agent.policies``)."""
    return POLICY if policy is None else f"{POLICY}/{policy}"

MODEL = "model/"
"""Prefix of the network's state_dict entries in a published version."""
OBS_RMS = "obs_rms/"
"""Prefix of the observation normalizer's statistics (``mean``, ``var``, ``count``)."""
RET_RMS = "ret_rms/"
"""Prefix of the return normalizer's statistics."""

OBS, ACTIONS, REWARDS = "obs", "actions", "rewards"
"""Per-step ``[T, N, ...]`` arrays every env runner records."""
TERMINATED, TRUNCATED = "terminated", "truncated"
"""Per-step ``[T, N]`` bools, kept apart: a termination ends the return, a truncation (a
time limit) only the episode (its final observation's value bootstraps)."""
ALIVE = "alive"
"""Per-step ``[T, N]`` bool of a multi-agent rollout: the column held a live agent at that step
(dead columns are left out of losses); absent for single-agent environments."""
FINAL_T, FINAL_ENV = "t", "env"
"""``Rollout.final`` entries: where each finished episode ended (``[K]`` int64); its final
observation is ``final[OBS]`` and the policy's extras of it sit under their own names."""
LOGP, VALUES = "logp", "values"
"""Per-step records of actor-critic algorithms (log-prob of the action, V(s))."""
LAST_VALUES = "values"
"""``Rollout.last`` entry: V(s_T) of the state after the last step, ``[N]``."""
OBS_MOMENTS, RET_MOMENTS = "obs", "ret"
"""``Rollout.moments`` entries: raw observation and discounted-return statistics."""


def actor_layout(model_keys: list[str], normalize_obs: bool, normalize_reward: bool) -> list[str]:
    """The tensors an actor fetches: its model, and the normalizer statistics it applies."""
    layout = [MODEL + k for k in model_keys]
    if normalize_obs:
        layout += [OBS_RMS + "mean", OBS_RMS + "var"]
    if normalize_reward:
        layout += [RET_RMS + "var"]
    return layout
