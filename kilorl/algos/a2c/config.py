"""A2C's configuration section (``algo.name: a2c``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kilorl.algos.config_base import OnPolicyConfig


class A2CConfig(OnPolicyConfig):
    """Advantage actor-critic: one gradient step per rollout on the policy-gradient loss."""

    name: Literal["a2c"] = "a2c"
    """Algorithm name."""
    rollout_length: int = Field(default=16, gt=0)
    """Environment steps each env takes per rollout (A2C prefers short rollouts)."""
    gae_lambda: float = Field(default=1.0, ge=0, le=1)
    """GAE lambda; 1.0 gives the classic n-step A2C return."""
    lr: float = Field(default=7e-4, gt=0)
    """Learning rate at the start of training."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """RMSprop (alpha 0.99, eps 1e-5) as in the A2C paper and SB3, or Adam."""

    def check_batch(self, batch_size: int, gradient_accumulation_steps: int) -> None:
        if batch_size % gradient_accumulation_steps:
            raise ValueError(
                f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the rollout batch {batch_size}"
            )

    def check_recurrent(self, parallelism: Any, gradient_accumulation_steps: int) -> None:
        """A recurrent model's micro-batches are whole env columns."""
        columns = parallelism.actor * parallelism.envs_per_actor
        if columns % gradient_accumulation_steps:
            raise ValueError(f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the "
                             f"{columns} env columns (parallelism.actor x parallelism.envs_per_actor) with model.recurrent")
