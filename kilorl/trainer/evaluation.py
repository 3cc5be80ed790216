"""Evaluation during training: when it is due, running it on learner 0, stopping on it and
keeping the best policy it saw.

The rolling training return lags the policy by every episode still in its window and is
taken with sampled actions; on CartPole it read 495 for a policy that, stopped there,
evaluated 269 (seed 3, docs/benchmarks.md). An evaluation plays whole episodes with the
policy the learner holds now, so a run that stops on it keeps the policy it measured.

Learner 0 plays the episodes between two updates: its weights are the version just
published, and the checkpoint the trainer writes next holds that same policy. With several
policies (a learner group each) every group's rank 0 hands over its policies' states first and
the first group's rank 0 plays them all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kilorl.config import EvaluationConfig
from kilorl.trainer.checkpoint import best_checkpoint
from kilorl.trainer.loop_errors import LearnerLost


class EvaluationSchedule:
    """Evaluates every ``every_env_steps`` env steps; says when ``stop_return`` is reached and
    when the last evaluation is the best so far."""

    def __init__(self, cfg: EvaluationConfig, env_steps: int, best_return: float | None = None) -> None:
        self.cfg = cfg
        every = cfg.every_env_steps
        self.next_due = (env_steps // every + 1) * every if every else None
        self.last_mean: float | None = None
        self.best_mean = best_return
        """The best evaluation so far (a resumed run starts from its best checkpoint's)."""
        self.improved = False
        """The last evaluation is at least as good as every one before it."""
        self._in_a_row = 0

    @classmethod
    def for_run(cls, cfg: EvaluationConfig, env_steps: int, run_dir: Path) -> EvaluationSchedule:
        """The schedule of a run that may already hold a best checkpoint (a resume, a restore)."""
        best = best_checkpoint(run_dir) if cfg.keep_best else None
        best_return = json.loads((best / "meta.json").read_text()).get("eval_return_mean") if best else None
        return cls(cfg, env_steps, best_return)

    def due(self, env_steps: int) -> bool:
        return self.next_due is not None and env_steps >= self.next_due

    def run(self, rank_zeros: list[Any], env_steps: int, several: bool = False) -> dict[str, float]:
        """Evaluate now on ``rank_zeros[0]`` (Ray actor handles: each learner group's rank 0);
        ``several``: a group per policy, whose states are gathered first. The statistics for
        the metrics row; ``eval_return_mean`` is the mean judged on (``evaluation.policy``'s
        return, or the episode's), ``eval_return_mean/<policy>`` each policy's."""
        import ray

        try:
            returns, per_policy = self._play(rank_zeros, several)
        except ray.exceptions.RayActorError as err:
            raise LearnerLost(f"learner 0 died during an evaluation ({type(err).__name__})") from err
        every = self.cfg.every_env_steps
        while self.next_due is not None and self.next_due <= env_steps:
            self.next_due += every  # type: ignore[operator]
        judged = per_policy[self.cfg.policy] if self.cfg.policy is not None else returns
        mean = self.last_mean = float(np.mean(judged))
        self.improved = self.best_mean is None or mean >= self.best_mean
        if self.improved:
            self.best_mean = mean
        stop = self.cfg.stop_return
        self._in_a_row = self._in_a_row + 1 if stop is not None and mean >= stop else 0
        return {"eval_return_mean": mean, "eval_return_std": float(np.std(judged)),
                "eval_return_min": float(np.min(judged)),
                **{f"eval_return_mean/{name}": float(np.mean(r)) for name, r in per_policy.items()}}

    def _play(self, rank_zeros: list[Any], several: bool) -> tuple[list[float], dict[str, list[float]]]:
        """Episode returns, and each policy's (several policies) or ``{}``."""
        import ray

        cfg = self.cfg
        if not several:
            return ray.get(rank_zeros[0].evaluate.remote(cfg.episodes, cfg.seed, cfg.deterministic)), {}
        states: dict[str, Any] = {}
        for part in ray.get([h.policy_states.remote() for h in rank_zeros]):
            states.update(part)
        played = ray.get(rank_zeros[0].evaluate_policies.remote(states, cfg.episodes, cfg.seed, cfg.deterministic))
        return played.returns, played.policy_returns

    def reached(self) -> bool:
        """The last ``stop_consecutive`` evaluations all met ``stop_return``."""
        return self._in_a_row >= self.cfg.stop_consecutive
