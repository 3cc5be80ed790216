"""IMPALA's configuration section (``algo.name: impala``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kilorl.algos.config_base import QueueConfig


class IMPALAConfig(QueueConfig):
    """V-trace actor-critic: policy gradient on V-trace advantages, baseline to V-trace targets."""

    name: Literal["impala"] = "impala"
    """Algorithm name."""
    lr: float = Field(default=6e-4, gt=0)
    """Learning rate at the start of training."""
    anneal_lr: bool = False
    """Linearly anneal the learning rate to 0 over total_env_steps."""
    optimizer: Literal["rmsprop", "adam"] = "adam"
    """Adam, or RMSprop (alpha 0.99, eps 0.01 as in the IMPALA paper)."""
    rho_bar: float = Field(default=1.0, gt=0)
    """Truncation of the importance weights in the V-trace targets."""
    c_bar: float = Field(default=1.0, gt=0)
    """Truncation of the trace-cutting coefficients."""
    vtrace_lambda: float = Field(default=1.0, ge=0, le=1)
    """Lambda of the traces (1: the paper's V-trace)."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Baseline (value) loss coefficient."""
    ent_coef: float = Field(default=0.01, ge=0)
    """Entropy bonus coefficient."""
    max_grad_norm: float = Field(default=40.0, gt=0)
    """Global gradient-norm clipping threshold."""
    norm_adv: bool = False
    """Normalise the V-trace advantages per batch."""


class APPOConfig(IMPALAConfig):
    """Asynchronous PPO on V-trace advantages."""

    name: Literal["appo"] = "appo"
    """Algorithm name."""
    clip_coef: float = Field(default=0.2, gt=0)
    """Ratio clipping epsilon of the surrogate."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Coefficient of the KL penalty towards the behaviour policy (0: none)."""
