"""DQN's configuration section (``algo.name: dqn``); field names follow SB3 / rl-zoo."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kilorl.algos.config_base import ReplayConfig
from kilorl.config_section import Section


class ApeXEpsilon(Section):
    """Ape-X's fixed epsilon per env runner: ``base ** (1 + alpha * i / (N - 1))``."""

    base: float = Field(default=0.4, gt=0, le=1)
    """Epsilon of env runner 0."""
    alpha: float = Field(default=7.0, ge=0)
    """How fast epsilon falls over the env runners."""


class DQNConfig(ReplayConfig):
    """Double DQN with a target network, Huber loss, n-step returns and epsilon-greedy actors."""

    replay_options: ClassVar[tuple[str, ...]] = ("prioritized", "samples_per_insert")

    name: Literal["dqn"] = "dqn"
    """Algorithm name."""
    lr: float = Field(default=1e-4, gt=0)
    """Adam learning rate."""
    train_freq: int = Field(default=4, gt=0)
    """Env steps (all env runners together) per ``gradient_steps`` gradient steps."""
    gradient_steps: int = Field(default=1, gt=0)
    """Gradient steps per ``train_freq`` env steps (the update-to-data ratio is their quotient)."""
    target_update_interval: int = Field(default=10_000, gt=0)
    """Env steps between target-network updates."""
    tau: float = Field(default=1.0, gt=0, le=1)
    """Target update: 1 copies the online network (hard); below 1, Polyak averaging."""
    n_step: int = Field(default=1, ge=1)
    """Steps of reward summed before bootstrapping (cut at episode and rollout ends)."""
    double_q: bool = True
    """Pick the next action with the online network, value it with the target (double DQN)."""
    max_grad_norm: float = Field(default=10.0, gt=0)
    """Global gradient-norm clipping threshold."""
    exploration_initial_eps: float = Field(default=1.0, ge=0, le=1)
    """Epsilon at the start of the schedule."""
    exploration_final_eps: float = Field(default=0.05, ge=0, le=1)
    """Epsilon after ``exploration_fraction`` of ``train.total_env_steps``."""
    exploration_fraction: float = Field(default=0.1, gt=0, le=1)
    """Share of the run over which epsilon falls linearly."""
    exploration: Literal["linear", "ape_x"] = "linear"
    """``linear``: one schedule for every env runner; ``ape_x``: a fixed epsilon per env runner."""
    ape_x: ApeXEpsilon = Field(default_factory=ApeXEpsilon)
    """Ape-X's per-runner epsilon (with ``exploration: ape_x``)."""

    @model_validator(mode="after")
    def _final_below_initial(self) -> DQNConfig:
        if self.exploration_final_eps > self.exploration_initial_eps:
            raise ValueError("exploration_final_eps must not exceed exploration_initial_eps")
        return self
