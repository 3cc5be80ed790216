"""Collectives between learners (torch.distributed): DDP, bucketed sync, gradient compression.

Knows nothing of RL: the learners pass modules, parameters and a ``CompressionConfig``.
See docs/comm.md for the methods, the wire encodings and the byte accounting.
"""

from kilorl.comm.collectives import GradientAllReducer, init_process_group, resolve_backend
from kilorl.comm.config import CompressionConfig
from kilorl.comm.ddp import DistributedModel
from kilorl.comm.hooks import CommHook, CommStats, make_comm_hook, run_comm_hook
from kilorl.comm.learner_sync import LearnerSync
from kilorl.comm.sparse import launch_sparse_allreduce, sparse_allreduce
from kilorl.comm.sync import BucketedAllReduce

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
