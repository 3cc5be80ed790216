"""Versioned parameters as bytes: layouts, resharding, and (on the data system) the parameter store.

Sits between ``kilorl.store`` (bytes, versions, ranges) and the roles (models). It knows
tensors and byte layouts, nothing of RL (docs/architecture.md, "Layers").
"""

from kilorl.params.layout import FlatLayout, Full, LayoutError, ReaderLayout, Shard, TensorSpec
from kilorl.params.resharding import RangeRequest, ReadPlan, pack, plan_read, read_local

__all__ = [
    "FlatLayout", "Full", "LayoutError", "RangeRequest", "ReadPlan", "ReaderLayout", "Shard", "TensorSpec",
    "pack", "plan_read", "read_local",
]
