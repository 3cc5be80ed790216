"""Where a run executes: an embedded local Ray instance, or an existing cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Cluster:
    """Execution target of a Trainer.

    ``address=None`` starts an embedded Ray instance on this machine (the same code
    path as a cluster). ``nodes``/``gpus_per_node`` describe the hardware for
    placement planning; ``communication_backend`` selects the learners' collectives
    (``auto``, ``gloo``, ``nccl`` or a registered vendor backend).
    """

    address: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    communication_backend: str = "auto"

    def connect(self, num_cpus_needed: int) -> bool:
        """Initialize Ray if needed; returns True when this call started it."""
        import ray

        if ray.is_initialized():
            return False
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if self.address is None:
            # "local" always starts a private instance; without it Ray joins whatever
            # `ray start` cluster last ran on this machine. Logical CPUs: every role must
            # fit even on a 2-core laptop; the OS shares the cores.
            kwargs["address"] = "local"
            kwargs["num_cpus"] = max(os.cpu_count() or 1, num_cpus_needed)
        else:
            kwargs["address"] = self.address
        ray.init(**kwargs)
        return True
