"""PPO's configuration section (``algo.name: ppo``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kilorl.algos.config_base import OnPolicyConfig


class PPOConfig(OnPolicyConfig):
    """Proximal Policy Optimization: clipped surrogate, several epochs of minibatches per rollout."""

    name: Literal["ppo"] = "ppo"
    """Algorithm name."""
    update_epochs: int = Field(default=10, gt=0)
    """Passes over each rollout batch."""
    num_minibatches: int = Field(default=4, gt=0)
    """Minibatches per epoch."""
    clip_coef: float = Field(default=0.2, gt=0)
    """Policy ratio clipping epsilon."""
    anneal_clip: bool = False
    """Decay ``clip_coef`` linearly to 0 over ``train.total_env_steps``, with the learning
    rate's schedule (rl-zoo's ``clip_range: lin_<x>``)."""
    clip_vloss: bool = True
    """Clip the value-function update around the old value estimate."""
    target_kl: float | None = Field(default=None, gt=0)
    """Stop the epoch loop early once the approximate KL exceeds this (None: never)."""

    def check_batch(self, batch_size: int, gradient_accumulation_steps: int) -> None:
        if batch_size % self.num_minibatches:
            raise ValueError(
                f"algo.num_minibatches={self.num_minibatches} must divide the rollout batch "
                f"{batch_size} (parallelism.actor x parallelism.envs_per_actor x algo.rollout_length)"
            )
        mb = batch_size // self.num_minibatches
        if mb % gradient_accumulation_steps:
            raise ValueError(
                f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the minibatch size {mb}"
            )

    def check_recurrent(self, parallelism: Any, gradient_accumulation_steps: int) -> None:
        """A recurrent model trains on minibatches of whole env columns, taken alike from every
        env runner's block (so 1 and K learners take the same steps)."""
        envs = parallelism.envs_per_actor
        if envs % self.num_minibatches:
            raise ValueError(f"algo.num_minibatches={self.num_minibatches} must divide parallelism.envs_per_actor="
                             f"{envs} with model.recurrent (a minibatch is whole env columns from every actor)")
        columns = parallelism.actor * envs // self.num_minibatches
        if columns % gradient_accumulation_steps:
            raise ValueError(f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the "
                             f"{columns} env columns of a minibatch with model.recurrent")
