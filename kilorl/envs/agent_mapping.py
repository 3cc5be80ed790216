"""Agents mapped to policies by name pattern (the config's ``multi_agent.policy_mapping``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any


def map_agents(policy_mapping: Mapping[str, str], agents: Sequence[str]) -> dict[str, str]:
    """``{agent: policy}``: each agent's first matching pattern, in the mapping's order; a
    ValueError listing every agent that no pattern matches."""
    out: dict[str, str] = {}
    for agent in agents:
        policy = next((p for pattern, p in policy_mapping.items() if fnmatch.fnmatchcase(agent, pattern)), None)
        if policy is not None:
            out[agent] = policy
    unmapped = [a for a in agents if a not in out]
    if unmapped:
        raise ValueError(f"multi_agent.policy_mapping: no pattern maps agents {unmapped} "
                         f"(patterns, first match wins: {list(policy_mapping)})")
    return out


def check_policy_spaces(env: Any, assignment: Mapping[str, str]) -> None:
    """Agents mapped to one policy share its network, so they need one observation and one
    action space; a ValueError naming the policy and the agents whose spaces differ."""
    by_policy: dict[str, list[str]] = {}
    for agent, policy in assignment.items():
        by_policy.setdefault(policy, []).append(agent)
    for policy, agents in by_policy.items():
        first = agents[0]
        obs, act = env.observation_space(first), env.action_space(first)
        odd = [a for a in agents[1:] if env.observation_space(a) != obs or env.action_space(a) != act]
        if odd:
            raise ValueError(f"multi_agent.policy_mapping: agents {odd} mapped to policy {policy!r} have "
                             f"observation/action spaces different from {first!r} ({obs}, {act}); agents on one "
                             "policy share its network")
