"""Pieces of the step record an env runner keeps beside the ``[T, N]`` arrays: the final
observations of finished episodes, s_T, and the check of a behaviour policy's extras."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.algos.api import BehaviourPolicy, Extra, State


def check_extras(policy: str, declared: Mapping[str, Extra], got: Mapping[str, np.ndarray], n: int) -> None:
    """``got`` (one step's extras for ``n`` envs) as ``declared``; else ValueError naming the entry."""
    missing, undeclared = sorted(set(declared) - set(got)), sorted(set(got) - set(declared))
    if missing or undeclared:
        raise ValueError(f"behaviour policy {policy}: extras {undeclared or ''}{' not declared' if undeclared else ''}"
                         f"{'; ' if missing and undeclared else ''}{f'declared {missing} not returned' if missing else ''}"
                         f" (declared: {sorted(declared)})")
    for name, spec in declared.items():
        value = np.asarray(got[name])
        want = (n, *spec.shape)
        if value.shape != want or value.dtype != np.dtype(spec.dtype):
            raise ValueError(f"behaviour policy {policy}: extra {name!r} is declared {spec.dtype} {list(spec.shape)} "
                             f"per env, act returned {value.dtype} {list(value.shape[1:])} for {value.shape[0]} envs")


class FinalObservations:
    """Where episodes ended inside one rollout, and their real final observations."""

    def __init__(self) -> None:
        self.t: list[np.ndarray] = []
        self.env: list[np.ndarray] = []
        self.obs: list[np.ndarray] = []
        self.state: list[State] = []

    def add(self, t: int, envs: np.ndarray, obs: np.ndarray, state: State | None = None) -> None:
        """Episodes of ``envs`` ended at step ``t`` with final observations ``obs``, seen with the
        policy's ``state`` rows (before its reset; empty for a memoryless policy)."""
        self.t.append(np.full(len(envs), t, np.int64))
        self.env.append(envs.astype(np.int64))
        self.obs.append(obs)
        self.state.append(state or {})

    def record(self, policy: BehaviourPolicy, model: torch.nn.Module, last_obs: np.ndarray,
               last_state: State | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(final, last)`` entries of the rollout: the policy's ``observe`` extras of the final
        observations and of s_T (a stateful policy's with the state each was seen with).

        Two forward passes, not one over both: a float32 matmul over ``N + K`` rows rounds the
        ``N`` rows of s_T differently from those rows alone (1 ulp on a 64-64 network), and
        which seeds of an example pass was decided by that last bit (docs/benchmarks.md)."""
        k = sum(len(e) for e in self.env)
        final_obs = np.concatenate(self.obs) if k else np.zeros((0, *last_obs.shape[1:]), last_obs.dtype)
        final = {keys.FINAL_T: np.concatenate(self.t) if k else np.zeros(0, np.int64),
                 keys.FINAL_ENV: np.concatenate(self.env) if k else np.zeros(0, np.int64),
                 keys.OBS: final_obs}
        last = {keys.OBS: last_obs}
        final_state = {key: np.concatenate([s[key] for s in self.state]) for key in last_state} if k and last_state else {}
        with torch.no_grad():
            of_last = _observe(policy, model, last_obs, last_state)
            of_final = _observe(policy, model, final_obs, final_state) if k else {}
        for name, value in of_last.items():
            last[name] = np.asarray(value)
            final[name] = np.asarray(of_final[name]) if k else np.zeros((0, *last[name].shape[1:]), last[name].dtype)
        return final, last


def _observe(policy: BehaviourPolicy, model: torch.nn.Module, obs: np.ndarray,
             state: State | None) -> dict[str, np.ndarray]:
    """``policy.observe``, handed the state only where there is one (memoryless policies keep the
    two-argument form)."""
    if state:
        return policy.observe(model, torch.from_numpy(obs), state)
    return policy.observe(model, torch.from_numpy(obs))
