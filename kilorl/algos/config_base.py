"""What every algorithm's configuration has, and the check it gets against the run's batch."""

from __future__ import annotations

from pydantic import Field

from kilorl.config_section import Section


class AlgoConfig(Section):
    """Base of an algorithm's section; subclasses add ``name: Literal[...]`` and their fields."""

    name: str
    """Algorithm name; selects the algorithm and which of its fields are allowed."""

    def check_batch(self, batch_size: int, gradient_accumulation_steps: int) -> None:
        """Raise ValueError when this algorithm cannot split a batch of ``batch_size`` samples."""


class OnPolicyConfig(AlgoConfig):
    """Fields shared by on-policy actor-critic methods that learn from ``[T, N]`` rollouts."""

    rollout_length: int = Field(default=128, gt=0)
    """Environment steps each env takes per rollout (batch = actors x envs x this)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE lambda (bias/variance trade-off of the advantage estimate)."""
    lr: float = Field(default=3e-4, gt=0)
    """Learning rate at the start of training."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate to 0 over total_env_steps."""
    norm_adv: bool = True
    """Normalize advantages per (mini)batch."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Entropy bonus coefficient."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Value loss coefficient."""
    max_grad_norm: float = Field(default=0.5, gt=0)
    """Global gradient-norm clipping threshold."""
