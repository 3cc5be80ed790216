"""A learner's state as checkpoint files: made in the learner's process, written by the driver.

The driver of a training run never imports torch. The import takes 1.4 s of CPU here, and the
driver used to take it on a background thread during the first rollouts, where it competed
with the learner and the actor for the cores (on 2 cores, CartPole ran at 3.4-3.9K env steps/s
for over a second, against 8-10K after). So the learner turns its state into the checkpoint's
bytes where torch already is, and the driver receives bytes and JSON, which it writes as they
are (``kilorl.trainer.checkpoint``). Only reading a checkpoint back needs torch.

Files: ``model.safetensors`` (the model's state dict) and ``state.safetensors`` (optimizer
moments under ``optim/<param>/<key>``, normalizer statistics under ``obs_rms/`` and
``ret_rms/``, the torch RNG state, and under ``x/`` every other tensor an algorithm names in
``state()["tensors"]``: target networks, a replay table's columns). The optimizer's structure
(param groups, scalar state) and the algorithm's JSON-able ``state()["extra_meta"]`` (counters,
a numpy RNG's state) go into ``meta.json`` next to the run's counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kilorl.algos.common.checkpointing import flatten_optimizer, unflatten_optimizer
from kilorl.core import CheckpointFiles

__all__ = ["EXTRA_PREFIX", "MODEL_FILE", "POLICIES_DIR", "STATE_FILE", "checkpoint_files", "flatten_optimizer",
           "unflatten_optimizer"]

if TYPE_CHECKING:
    pass

MODEL_FILE = "model.safetensors"
STATE_FILE = "state.safetensors"
POLICIES_DIR = "policies"
"""Folder of a checkpoint of several policies: one subfolder of these files per policy
(``kilorl.roles.policy_learners``)."""
EXTRA_PREFIX = "x/"
"""Prefix in ``state.safetensors`` of the tensors an algorithm adds (``state()["tensors"]``)."""


def checkpoint_files(learner_state: dict[str, Any]) -> CheckpointFiles:
    """A learner's ``state()`` as the checkpoint's file contents (run where torch is)."""
    import torch
    from safetensors.torch import save

    opt_tensors, opt_structure = flatten_optimizer(learner_state["optimizer"])
    extra = {
        **opt_tensors,
        "torch_rng": learner_state["torch_rng"],
        **{f"obs_rms/{k}": torch.tensor(np.asarray(v)) for k, v in learner_state["obs_rms"].items()},
        **{f"ret_rms/{k}": torch.tensor(np.asarray(v)) for k, v in learner_state["ret_rms"].items()},
        **{EXTRA_PREFIX + k: torch.as_tensor(np.ascontiguousarray(v)).contiguous()
           for k, v in learner_state.get("tensors", {}).items()},
    }
    files = {MODEL_FILE: save({k: v.contiguous() for k, v in learner_state["model"].items()}), STATE_FILE: save(extra)}
    meta = {"updates": learner_state["updates"], "optimizer": opt_structure}
    if learner_state.get("extra_meta"):
        meta["algorithm"] = learner_state["extra_meta"]
    return CheckpointFiles(files, meta)
