"""Collectives between learners (torch.distributed): DDP, bucketed sync, gradient compression.

Knows nothing of RL: the learners pass modules, parameters and a ``CompressionConfig``.
See docs/comm.md for the methods, the wire encodings and the byte accounting.

The names below are imported on first use (PEP 562), not with the package: the config
section (``kilorl.comm.config``) is read by every ``kilorl`` command and by the driver,
and importing torch with it cost 1.5 s of start-up there (``python -X importtime -c
"from kilorl.config import load_config"``: 1.80 s before, see docs/benchmarks.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "BucketedAllReduce": "sync",
    "CommHook": "hooks",
    "CommStats": "hooks",
    "CompressionConfig": "config",
    "DistributedModel": "ddp",
    "GradientAllReducer": "collectives",
    "LearnerSync": "learner_sync",
    "init_process_group": "collectives",
    "launch_sparse_allreduce": "sparse",
    "make_comm_hook": "hooks",
    "resolve_backend": "collectives",
    "run_comm_hook": "hooks",
    "sparse_allreduce": "sparse",
}
__all__ = [
    "BucketedAllReduce",
    "CommHook",
    "CommStats",
    "CompressionConfig",
    "DistributedModel",
    "GradientAllReducer",
    "LearnerSync",
    "init_process_group",
    "launch_sparse_allreduce",
    "make_comm_hook",
    "resolve_backend",
    "run_comm_hook",
    "sparse_allreduce",
]

if TYPE_CHECKING:
    from kilorl.comm.collectives import GradientAllReducer, init_process_group, resolve_backend
    from kilorl.comm.config import CompressionConfig
    from kilorl.comm.ddp import DistributedModel
    from kilorl.comm.hooks import CommHook, CommStats, make_comm_hook, run_comm_hook
    from kilorl.comm.learner_sync import LearnerSync
    from kilorl.comm.sparse import launch_sparse_allreduce, sparse_allreduce
    from kilorl.comm.sync import BucketedAllReduce


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kilorl.comm' has no attribute {name!r}")
    value = getattr(import_module(f"kilorl.comm.{module}"), name)
    globals()[name] = value
    return value
