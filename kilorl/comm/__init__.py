"""Collectives between learners (torch.distributed). Knows nothing of RL."""

from kilorl.comm.collectives import GradientAllReducer, init_process_group, resolve_backend

__all__ = ["GradientAllReducer", "init_process_group", "resolve_backend"]
