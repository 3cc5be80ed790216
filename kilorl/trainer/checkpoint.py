"""Checkpoints: safetensors for every tensor, JSON for everything else.

Layout of one checkpoint directory (``checkpoints/step_<env_steps>``):
``model.safetensors`` (policy/value weights), ``state.safetensors`` (optimizer moments,
normalizer statistics, RNG state) and ``meta.json`` (counters, optimizer structure, the
resolved config). Written to a temporary directory and renamed, so a crash mid-write
never leaves a half checkpoint that ``latest_checkpoint`` would pick up.

torch and safetensors are imported when first needed (the driver of a run does not need
torch to start; ``kilorl.trainer.preload`` imports them in the background once the roles are up).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

PREFIX = "step_"


def _flatten_optimizer(opt_state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    import torch

    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, per_param in opt_state["state"].items():
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim/{idx}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": opt_state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], structure: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith("optim/"):
            continue
        _, idx, key = name.split("/", 2)
        state.setdefault(int(idx), {})[key] = value
    for idx, extra in structure.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(extra)
    return {"state": state, "param_groups": structure["param_groups"]}


def save_checkpoint(run_dir: Path, learner_state: dict[str, Any], meta: dict[str, Any], keep: int = 3) -> Path:
    """Write a checkpoint for ``meta['env_steps']``; keep the newest ``keep``."""
    import torch
    from safetensors.torch import save_file

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{int(meta['env_steps']):012d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.contiguous() for k, v in learner_state["model"].items()}, str(tmp / "model.safetensors"))
    opt_tensors, opt_structure = _flatten_optimizer(learner_state["optimizer"])
    extra = {
        **opt_tensors,
        "torch_rng": learner_state["torch_rng"],
        **{f"obs_rms/{k}": torch.tensor(np.asarray(v)) for k, v in learner_state["obs_rms"].items()},
        **{f"ret_rms/{k}": torch.tensor(np.asarray(v)) for k, v in learner_state["ret_rms"].items()},
    }
    save_file(extra, str(tmp / "state.safetensors"))
    meta = {**meta, "updates": learner_state["updates"], "optimizer": opt_structure}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(p for p in root.iterdir() if p.name.startswith(PREFIX))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / "meta.json").exists())
    return found[-1] if found else None


def resolve_checkpoint(path: Path) -> Path:
    """Accept a checkpoint directory or a run directory (its newest checkpoint)."""
    path = Path(path)
    if (path / "meta.json").is_file() and (path / "model.safetensors").is_file():
        return path
    ckpt = latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"{path}: neither a checkpoint nor a run directory with checkpoints")
    return ckpt


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(learner_state, meta)`` as saved by ``save_checkpoint``."""
    from safetensors.torch import load_file

    ckpt = resolve_checkpoint(path)
    meta = json.loads((ckpt / "meta.json").read_text())
    model = load_file(str(ckpt / "model.safetensors"))
    extra = load_file(str(ckpt / "state.safetensors"))
    state = {
        "model": model,
        "optimizer": _unflatten_optimizer(extra, meta["optimizer"]),
        "obs_rms": {k.split("/", 1)[1]: v.numpy() for k, v in extra.items() if k.startswith("obs_rms/")},
        "ret_rms": {k.split("/", 1)[1]: v.numpy() for k, v in extra.items() if k.startswith("ret_rms/")},
        "torch_rng": extra["torch_rng"],
        "updates": meta["updates"],
    }
    return state, meta


class Checkpointer:
    """When to checkpoint (every ``every_env_steps`` and at the end) and the writing itself."""

    def __init__(self, run_dir: Path, every_env_steps: int | None, keep: int, config_json: dict[str, Any],
                 env_steps: int) -> None:
        self.run_dir, self.every, self.keep, self.config_json = Path(run_dir), every_env_steps, keep, config_json
        self.next_due = (env_steps // every_env_steps + 1) * every_env_steps if every_env_steps else None
        self.last_path: Path | None = None
        self.last_steps = -1

    def due(self, env_steps: int) -> bool:
        return self.next_due is not None and env_steps >= self.next_due

    def save(self, learner_state: dict[str, Any], meta: dict[str, Any]) -> Path:
        self.last_path = save_checkpoint(self.run_dir, learner_state, {**meta, "config": self.config_json}, self.keep)
        self.last_steps = int(meta["env_steps"])
        while self.next_due is not None and self.next_due <= self.last_steps:
            self.next_due += self.every  # type: ignore[operator]
        return self.last_path
