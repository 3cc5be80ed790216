"""PPO's configuration section (``algo.name: ppo``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

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
    sequence_mode: Literal["columns", "chunks"] = "columns"
    """How a recurrent model's minibatches cut the rollout: ``columns`` (whole env columns, each
    unrolled over the whole rollout from the state saved at its start: backpropagation through
    all ``rollout_length`` steps) or ``chunks`` (windows of ``sequence_length`` steps of a
    column, each from its stored state, ``burn_in`` steps refreshing it; ``kilorl.algos.sequences``).
    Ignored by a memoryless model."""
    sequence_length: int = Field(default=16, gt=0)
    """``chunks``: steps in one chunk, burn-in included. A gradient flows through at most
    ``sequence_length - burn_in`` steps (the truncated BPTT length)."""
    burn_in: int = Field(default=0, ge=0)
    """``chunks``: steps before a chunk's trained steps that only refresh its stored state with
    the current parameters (no loss, no gradient; R2D2's burn-in). They are the previous chunk's
    trained steps, so every step carries the loss once."""

    @model_validator(mode="after")
    def _burn_in_shorter_than_the_chunk(self) -> PPOConfig:
        if self.burn_in >= self.sequence_length:
            raise ValueError(f"algo.burn_in={self.burn_in} must be smaller than algo.sequence_length="
                             f"{self.sequence_length} (a chunk needs steps that carry the loss)")
        return self

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
        if self.sequence_mode == "chunks":
            self._check_chunks(parallelism, gradient_accumulation_steps)
            return
        envs = parallelism.envs_per_actor
        if envs % self.num_minibatches:
            raise ValueError(f"algo.num_minibatches={self.num_minibatches} must divide parallelism.envs_per_actor="
                             f"{envs} with model.recurrent (a minibatch is whole env columns from every actor)")
        columns = parallelism.actor * envs // self.num_minibatches
        if columns % gradient_accumulation_steps:
            raise ValueError(f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the "
                             f"{columns} env columns of a minibatch with model.recurrent")

    def _check_chunks(self, parallelism: Any, gradient_accumulation_steps: int) -> None:
        """A minibatch is chunks taken alike from every env runner's block of ``envs_per_actor``
        columns of ``ceil(rollout_length / (sequence_length - burn_in))`` chunks each."""
        if self.sequence_length > self.rollout_length:
            raise ValueError(f"algo.sequence_length={self.sequence_length} does not fit the rollout: it must not "
                             f"exceed algo.rollout_length={self.rollout_length} (sequence_mode: chunks)")
        per_column = -(-self.rollout_length // (self.sequence_length - self.burn_in))
        block = parallelism.envs_per_actor * per_column
        if block % self.num_minibatches:
            raise ValueError(f"algo.num_minibatches={self.num_minibatches} must divide the {block} chunks of an env "
                             f"runner (parallelism.envs_per_actor={parallelism.envs_per_actor} x {per_column} chunks "
                             f"of algo.rollout_length={self.rollout_length} by algo.sequence_length="
                             f"{self.sequence_length} - algo.burn_in={self.burn_in})")
        chunks = parallelism.actor * block // self.num_minibatches
        if chunks % gradient_accumulation_steps:
            raise ValueError(f"train.gradient_accumulation_steps={gradient_accumulation_steps} must divide the "
                             f"{chunks} chunks of a minibatch with algo.sequence_mode=chunks")
