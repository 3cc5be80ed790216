"""The high level of a two-level policy collects on its own time scale: one row per option.

``MultiPolicyEnvRunner`` cuts one ``[T, N]`` rollout per policy from the shared step record.
With ``multi_agent.hierarchy`` the high level's cut is then rewritten by ``OptionRecorder``:
each option becomes one row (the observation, action and extras of its decision step, and
the rewards of all its steps summed, or discounted with ``option_reward: discounted``), so
the high level's GAE runs over consecutive options and its ``gamma`` discounts per option.
An option is recorded in the rollout in which it ends (its successor's decision step, or the
episode's end): one still running when the rollout ends is carried into the next. Each
column's options fill the *last* rows of its ``[T, N]`` (at most one option ends per step);
the rows before them are dead (``alive`` false, ``terminated`` true, so GAE does not reach
them) and the learner's alive mask keeps them out of every loss. ``last`` holds, per column,
the value of the option running at the rollout's end (the state its predecessor ended in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kilorl.algos import keys
from kilorl.core import Rollout
from kilorl.envs.option_levels import HIGH, LOW, OptionLevels, decision_flags
from kilorl.roles.policy_columns import MultiPolicyEnvRunner, PolicyRollouts
from kilorl.roles.step_record import FinalObservations

if TYPE_CHECKING:
    from kilorl.config import Config
    from kilorl.core import ParameterStore


@dataclass
class Option:
    """One option of one column while it runs: its decision step's record and its reward so far."""

    row: dict[str, np.ndarray]
    """The decision step's entries (observation, action, extras) of the column."""
    reward: float = 0.0
    discount: float = 1.0


@dataclass
class OptionRows:
    """Options that ended in one rollout, per column, in order (``OptionRecorder.add``)."""

    rows: list[list[dict[str, np.ndarray]]] = field(default_factory=list)
    rewards: list[list[float]] = field(default_factory=list)
    ends: list[list[tuple[bool, bool, int]]] = field(default_factory=list)
    """(terminated, truncated, step of the rollout) of each option's last step."""


class OptionRecorder:
    """Turns a high-level policy's per-step rollouts into per-option ones (module docstring)."""

    def __init__(self, num_columns: int, gamma_in: float = 1.0) -> None:
        """``gamma_in``: discount of the rewards inside an option (1: their plain sum)."""
        self.running: list[Option | None] = [None] * num_columns
        self.gamma_in = gamma_in

    def options(self, steps: dict[str, np.ndarray], decision: np.ndarray) -> OptionRows:
        """The options that end in ``steps`` (``[T, N]``; ``decision``: the decision steps)."""
        T, N = steps[keys.REWARDS].shape
        out = OptionRows([[] for _ in range(N)], [[] for _ in range(N)], [[] for _ in range(N)])
        alive = steps[keys.ALIVE]
        row_keys = [k for k in steps if k not in (keys.REWARDS, keys.TERMINATED, keys.TRUNCATED, keys.ALIVE)]
        for n in np.flatnonzero(alive.any(axis=0)):
            for t in np.flatnonzero(alive[:, n]):
                running = self.running[n]
                if decision[t, n]:
                    if running is not None:  # its successor's decision: the option ended on the step before
                        self._end(out, n, running, False, False, t - 1)
                    running = self.running[n] = Option({k: steps[k][t, n] for k in row_keys})
                if running is None:
                    continue  # steps before the column's first decision (none with OptionLevels)
                running.reward += running.discount * float(steps[keys.REWARDS][t, n])
                running.discount *= self.gamma_in
                term, trunc = bool(steps[keys.TERMINATED][t, n]), bool(steps[keys.TRUNCATED][t, n])
                if term or trunc:
                    self._end(out, n, running, term, trunc, t)
                    self.running[n] = None
        return out

    @staticmethod
    def _end(out: OptionRows, n: int, option: Option, term: bool, trunc: bool, t: int) -> None:
        out.rows[n].append(option.row)
        out.rewards[n].append(option.reward)
        out.ends[n].append((term, trunc, t))

    def rollout(self, cut: Rollout, decision: np.ndarray) -> Rollout:
        """The per-option rollout of one per-step cut (``MultiPolicyEnvRunner``'s, for this policy)."""
        steps = cut.steps
        T, N = steps[keys.REWARDS].shape
        done = self.options(steps, decision)
        out = {k: np.zeros_like(v) for k, v in steps.items()}
        out[keys.TERMINATED][:] = True  # dead rows cut GAE off from the options after them
        finals_at = {(int(t), int(e)): i for i, (t, e) in enumerate(zip(cut.final.get(keys.FINAL_T, []),
                                                                        cut.final.get(keys.FINAL_ENV, []),
                                                                        strict=True))}
        final_t: list[tuple[int, int, int]] = []
        for n in range(N):
            first = T - len(done.rows[n])
            assert first >= 0, "an option spans a decision step and a move, so at most T of them end in T steps"
            for j, (row, reward, (term, trunc, t)) in enumerate(zip(done.rows[n], done.rewards[n], done.ends[n],
                                                                     strict=True)):
                for k, v in row.items():
                    out[k][first + j, n] = v
                out[keys.REWARDS][first + j, n] = reward
                out[keys.ALIVE][first + j, n] = True
                out[keys.TERMINATED][first + j, n], out[keys.TRUNCATED][first + j, n] = term, trunc
                if (term or trunc) and (t, n) in finals_at:
                    final_t.append((first + j, n, finals_at[(t, n)]))
        final = dict(cut.final)
        if cut.final:
            pick = np.array([i for _, _, i in final_t], np.int64)
            final = {k: np.asarray(v)[pick] for k, v in cut.final.items()}
            final[keys.FINAL_T] = np.array([j for j, _, _ in final_t], np.int64)
            final[keys.FINAL_ENV] = np.array([n for _, n, _ in final_t], np.int64)
        last = {k: np.array(v, copy=True) for k, v in cut.last.items()}
        for n, running in enumerate(self.running):
            if running is not None:  # bootstrap from the option running now: its decision's entries
                for k in last:
                    if k in running.row:
                        last[k][n] = running.row[k]
        return Rollout(steps=out, last=last, final=final, version=cut.version, env_steps_before=cut.env_steps_before,
                       column_versions=cut.column_versions, state=cut.state, moments=cut.moments)


class HierarchicalEnvRunner(MultiPolicyEnvRunner):
    """``MultiPolicyEnvRunner`` over ``OptionLevels`` copies whose high level collects per option."""

    def __init__(self, cfg: Config, store: ParameterStore, index: int, seed: int) -> None:  # noqa: D107
        super().__init__(cfg, store, index, seed)
        section = cfg.multi_agent.hierarchy if cfg.multi_agent is not None else None
        assert section is not None
        if not isinstance(self.agents.copies[0], OptionLevels):
            self.envs.close()
            raise ValueError(f"multi_agent.hierarchy: env.id {cfg.env.id!r} is not option levels "
                             "(env.id: kilorl.envs.option_levels:option_levels)")
        mapped = {HIGH: self.agents.agent_policy.get(HIGH), LOW: self.agents.agent_policy.get(LOW)}
        if mapped != {HIGH: section.high, LOW: section.low}:
            self.envs.close()
            raise ValueError(f"multi_agent.hierarchy: the agents map to {mapped}, the section names high "
                             f"{section.high!r} and low {section.low!r} (policy_mapping: high -> high level, "
                             "low -> low level)")
        self.high = section.high
        gamma_in = self.views[section.low].algo.discount if section.option_reward == "discounted" else 1.0
        self.recorder = OptionRecorder(self.envs.num_envs, gamma_in)

    def _policy_rollouts(self, steps: dict[str, np.ndarray], owner: np.ndarray,
                         extras: dict[str, dict[str, np.ndarray]], finals: FinalObservations,
                         env_steps: int) -> PolicyRollouts:
        out = super()._policy_rollouts(steps, owner, extras, finals, env_steps)
        cut = out[self.high]
        out[self.high] = self.recorder.rollout(cut, decision_flags(cut.steps[keys.OBS]))
        return out
