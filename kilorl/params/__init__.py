"""Versioned parameters as bytes: layouts, resharding, and (on the data system) the parameter store.

Sits between ``kilorl.store`` (bytes, versions, ranges) and the roles (models). It knows
tensors and byte layouts, nothing of RL (docs/architecture.md, "Layers").

The names below are imported on first use (PEP 562): the driver imports
``kilorl.params.reconnect`` on its start-up path, and torch must not come with it there
(a training run's driver never imports torch, ``kilorl.roles.checkpoint_format``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "FlatLayout": "layout", "Full": "layout", "LayoutError": "layout", "ReaderLayout": "layout", "Shard": "layout",
    "TensorSpec": "layout", "RangeRequest": "resharding", "ReadPlan": "resharding", "pack": "resharding",
    "plan_read": "resharding", "read_local": "resharding",
}
__all__ = [
    "FlatLayout", "Full", "LayoutError", "RangeRequest", "ReadPlan", "ReaderLayout", "Shard", "TensorSpec",
    "pack", "plan_read", "read_local",
]

if TYPE_CHECKING:
    from kilorl.params.layout import FlatLayout, Full, LayoutError, ReaderLayout, Shard, TensorSpec
    from kilorl.params.resharding import RangeRequest, ReadPlan, pack, plan_read, read_local


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kilorl.params' has no attribute {name!r}")
    value = getattr(import_module(f"kilorl.params.{module}"), name)
    globals()[name] = value
    return value
