"""Gradient compression settings (the run config mounts this as the section ``compression``).

Self-contained on purpose: ``kilorl.config`` imports it, it imports nothing of the RL side.
A field that only one method reads is an error when set to a non-default value for
another method, so a configuration never carries a knob that silently does nothing
(defaults are allowed, so a dumped, fully resolved config loads again).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Method = Literal["none", "bf16", "powersgd", "threshold_topk"]

# Which method reads which optional field; setting a field for another method is an error.
_FIELD_METHODS: dict[str, tuple[str, ...]] = {
    "threshold": ("threshold_topk",),
    "topk_ratio": ("threshold_topk",),
    "index_encoding": ("threshold_topk",),
    "value_dtype": ("threshold_topk",),
    "error_feedback": ("threshold_topk", "powersgd"),
    "warmup_steps": ("threshold_topk", "powersgd"),
    "powersgd_rank": ("powersgd",),
}


class CompressionConfig(BaseModel):
    """How learners compress gradients before they cross the network."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    method: Method = "none"
    """``none`` (dense fp32 all-reduce), ``bf16`` (torch's bf16 comm hook: half the bytes),
    ``powersgd`` (torch's low-rank PowerSGD hook), ``threshold_topk`` (drop |g| < threshold,
    keep the largest ``topk_ratio`` of the rest, sparse all-gather). Default ``none``."""
    threshold: float = Field(default=1e-4, ge=0)
    """threshold_topk: entries with |g + residual| below this are never sent. Default 1e-4."""
    topk_ratio: float = Field(default=0.3, gt=0, le=1)
    """threshold_topk: fraction of the entries above ``threshold`` that are sent, largest
    magnitudes first; in (0, 1]. Default 0.3."""
    error_feedback: bool = True
    """threshold_topk and powersgd: keep what was not sent in a per-worker residual and add it
    to the next gradient (Deep Gradient Compression / PowerSGD). Without it top-k stalls
    learning. Default true."""
    warmup_steps: int = Field(default=0, ge=0)
    """threshold_topk and powersgd: updates that use a dense all-reduce before compression
    starts. Under DDP the first update is always dense (DDP rebuilds its buckets after it);
    PowerSGD needs at least 2 (torch's rule). Default 0."""
    powersgd_rank: int = Field(default=1, ge=1)
    """powersgd: rank of the low-rank approximation of each gradient matrix. Default 1."""
    index_encoding: Literal["auto", "bitmap", "varint", "coo32"] = "auto"
    """threshold_topk: how the kept positions are written. ``bitmap`` (1 bit per entry),
    ``varint`` (delta + LEB128 varint of the gaps), ``coo32`` (raw int32, for comparison);
    ``auto`` picks the smaller of bitmap and varint per bucket. Default auto."""
    value_dtype: Literal["float32", "bfloat16"] = "bfloat16"
    """threshold_topk: dtype of the kept values on the wire; the rounding error goes into the
    residual when error_feedback is on. Default bfloat16."""

    @model_validator(mode="after")
    def _fields_match_method(self) -> CompressionConfig:
        for name in sorted(self.model_fields_set):
            users = _FIELD_METHODS.get(name)
            # A default value is allowed anywhere: a dumped, resolved config must load again.
            if users is not None and self.method not in users and getattr(self, name) != type(self).model_fields[name].default:
                raise ValueError(
                    f"compression.{name} applies only to method {' or '.join(users)}, "
                    f"not to method={self.method!r}; remove it or change compression.method"
                )
        return self

    @property
    def compresses(self) -> bool:
        """True when gradients leave this worker in any form other than dense fp32."""
        return self.method != "none"
