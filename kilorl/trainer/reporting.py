"""Turning iterations into metric rows: rolling returns, throughput, policy lag."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from kilorl.config import Config
from kilorl.core import RolloutInfo, step_lags
from kilorl.trainer.data_path import IterationResult
from kilorl.trainer.metrics import MetricsWriter


class Reporter:
    """Keeps the episode statistics of a run and writes a row every ``report_every_s``."""

    def __init__(self, cfg: Config, metrics: MetricsWriter, meta: dict[str, Any], t_start: float,
                 startup: dict[str, float]) -> None:
        self.cfg, self.metrics = cfg, metrics
        self.returns: deque[float] = deque(meta.get("recent_returns", []), maxlen=cfg.logging.return_window)
        self.agent_returns: dict[str, deque[float]] = {}
        """Multi-agent environments: each agent's recent returns (rows' ``agent_return_mean/<agent>``)."""
        self.episodes = int(meta.get("episodes", 0))
        self.wall_offset = float(meta.get("wall_time", 0.0))
        self.t_start = t_start
        self.startup = startup
        self.loop_t0 = time.time()
        self.last_t, self.last_steps = self.loop_t0, int(meta.get("env_steps", 0))
        self.time_up = False
        """The last iteration observed ended past ``train.time_budget_s`` of training (start-up excluded)."""

    @property
    def return_mean(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def solved(self) -> bool:
        """The rolling return over a full window reached ``train.stop_return``."""
        stop = self.cfg.train.stop_return
        mean = self.return_mean
        return stop is not None and mean is not None and len(self.returns) >= self.cfg.logging.return_window and mean >= stop

    def wall_time(self) -> float:
        return self.wall_offset + time.time() - self.t_start

    def observe(self, it: IterationResult) -> bool:
        """Fold in one iteration, report when due; returns True when the run is solved."""
        for info in it.infos:
            self.returns.extend(info["episode_returns"])
            self.episodes += len(info["episode_returns"])
            for agent, returns in info.get("agent_returns", {}).items():
                self.agent_returns.setdefault(agent, deque(maxlen=self.cfg.logging.return_window)).extend(returns)
        solved = self.solved()
        now = time.time()
        budget = self.cfg.train.time_budget_s
        self.time_up = budget is not None and now - self.loop_t0 >= budget
        ending = it.last or solved or self.time_up
        if now - self.last_t >= self.cfg.logging.report_every_s or ending or "eval_return_mean" in it.stats:
            self.metrics.report(self._row(it, now))
            self.last_t, self.last_steps = now, it.env_steps
        return solved

    def _row(self, it: IterationResult, now: float) -> dict[str, Any]:
        infos = it.infos
        row: dict[str, Any] = {
            "env_steps": it.env_steps, "wall_time": self.wall_offset + now - self.t_start,
            "train_time": now - self.loop_t0, **self.startup,
            "sps": (it.env_steps - self.last_steps) / max(now - self.last_t, 1e-9),
            "iteration": it.iteration, "episodes": self.episodes,
            **collect_times(infos, it.iteration),
            **collect_shares(infos),
            **it.stats,
        }
        if self.returns:
            row["episode_return_mean"] = self.return_mean
        for agent, returns in self.agent_returns.items():
            row[f"agent_return_mean/{agent}"] = float(np.mean(returns))
        return row

    def checkpoint_meta(self, env_steps: int, iteration: int) -> dict[str, Any]:
        """The driver's counters, saved with the learner's state."""
        return {"env_steps": env_steps, "iteration": iteration, "version": iteration, "episodes": self.episodes,
                "wall_time": self.wall_time(), "recent_returns": list(self.returns)}


def collect_times(infos: list[RolloutInfo], iteration: int) -> dict[str, float]:
    """Mean collection and wait seconds and policy lag of the iteration's rollouts (none in
    an offline-only run: no env runner collects)."""
    if not infos:
        return {}
    return {"collect_s": float(np.mean([i["collect_s"] for i in infos])),
            "actor_wait_s": float(np.mean([i["wait_s"] for i in infos])),
            "policy_lag": float(np.mean([lag for i in infos for lag in step_lags(i, iteration - 1)]))}


def collect_shares(infos: list[RolloutInfo]) -> dict[str, float]:
    """Where the env runners' time per rollout went, as shares of it: ``collect_share_env``
    (environment steps), ``_inference`` (the behaviour policy), ``_other`` (the rest of the
    collection: recording, bookkeeping), ``_wait`` (for parameters) and ``_handoff`` (the
    rollout written to the store worker; only with ``store.transport: store``)."""
    timed = [i for i in infos if "env_step_s" in i]
    if not timed:
        return {}
    env = sum(i["env_step_s"] for i in timed)
    inference = sum(i.get("inference_s", 0.0) for i in timed)
    collect = sum(i["collect_s"] for i in timed)
    wait = sum(i["wait_s"] for i in timed)
    handoff = sum(i.get("handoff_s", 0.0) for i in timed)
    total = collect + wait + handoff
    if total <= 0:
        return {}
    shares = {"env": env, "inference": inference, "other": max(collect - env - inference, 0.0), "wait": wait}
    if any("handoff_s" in i for i in timed):
        shares["handoff"] = handoff
    return {f"collect_share_{k}": v / total for k, v in shares.items()}
