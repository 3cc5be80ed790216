"""SAC's configuration section (``algo.name: sac``); defaults follow Stable-Baselines3 and
CleanRL (separate policy and Q learning rates, CleanRL's)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kilorl.algos.config_base import ReplayConfig


class SACConfig(ReplayConfig):
    """Twin (or ensemble) soft Q critics with Polyak targets and a tanh-squashed Gaussian policy."""

    name: Literal["sac"] = "sac"
    """Algorithm name."""
    buffer_size: int = Field(default=1_000_000, gt=0)
    """Rows the replay table keeps (oldest evicted first)."""
    batch_size: int = Field(default=256, gt=0)
    """Rows sampled per gradient step."""
    learning_starts: int = Field(default=100, ge=0)
    """Env steps of uniformly random actions collected before the first gradient step."""
    policy_lr: float = Field(default=3e-4, gt=0)
    """Adam learning rate of the policy."""
    q_lr: float = Field(default=1e-3, gt=0)
    """Adam learning rate of the Q critics."""
    alpha_lr: float = Field(default=1e-3, gt=0)
    """Adam learning rate of the entropy coefficient's logarithm (automatic tuning only)."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak factor of the target critics after every critic step: ``target += tau * (online - target)``."""
    alpha: float | None = Field(default=None, gt=0)
    """A fixed entropy coefficient; None tunes it automatically toward ``target_entropy``."""
    init_alpha: float = Field(default=1.0, gt=0)
    """Entropy coefficient at the start of automatic tuning."""
    target_entropy: float | None = None
    """Entropy the automatic tuning aims at; None: ``-|A|`` (minus the action dimensions)."""
    utd_ratio: float = Field(default=1.0, gt=0)
    """Gradient steps per env step inserted (update-to-data ratio; RLPD uses 20)."""
    policy_delay: int = Field(default=1, ge=1)
    """Critic steps per policy phase; each phase takes ``policy_delay`` policy (and alpha)
    steps, so the two are stepped equally often (CleanRL's ``policy_frequency``)."""
    num_qs: int = Field(default=2, ge=1)
    """Q critics in the ensemble (2: SAC's twin Q; RLPD uses 10)."""
    num_min_qs: int = Field(default=2, ge=1)
    """Critics drawn at random per step whose minimum makes the target (all of them: SAC's
    twin minimum). The policy maximises the critics' minimum when this is ``num_qs``, their
    mean otherwise (REDQ / RLPD)."""
    critic_layer_norm: bool = False
    """LayerNorm after every hidden layer of the critics (RLPD)."""
    critic_hidden_sizes: list[int] | None = None
    """Hidden widths of each critic; None: the policy's (``model.hidden_sizes``)."""
    n_step: int = Field(default=1, ge=1)
    """Steps of reward summed before bootstrapping (cut at episode and rollout ends)."""
    max_grad_norm: float | None = Field(default=None, gt=0)
    """Global gradient-norm clipping of every optimizer step; None: no clipping (SAC's usual)."""

    @model_validator(mode="after")
    def _min_qs_within_ensemble(self) -> SACConfig:
        if self.num_min_qs > self.num_qs:
            raise ValueError(f"num_min_qs={self.num_min_qs} exceeds num_qs={self.num_qs}")
        if self.critic_hidden_sizes is not None and (not self.critic_hidden_sizes
                                                     or any(h <= 0 for h in self.critic_hidden_sizes)):
            raise ValueError("critic_hidden_sizes must be a non-empty list of positive integers")
        return self

    def check_parallelism(self, parallelism: Any) -> None:
        if parallelism.learner != 1:
            raise ValueError(f"parallelism.learner={parallelism.learner}: algo.name=sac trains with one learner "
                             "(its three optimizers are not wired to gradient averaging yet)")
