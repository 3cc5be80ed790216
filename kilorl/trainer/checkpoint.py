"""Checkpoints: safetensors for every tensor, JSON for everything else.

Layout of one checkpoint directory (``checkpoints/step_<env_steps>``):
``model.safetensors`` (policy/value weights), ``state.safetensors`` (optimizer moments,
normalizer statistics, RNG state) and ``meta.json`` (counters, optimizer structure, the
resolved config). Written to a temporary directory and renamed, so a crash mid-write
never leaves a half checkpoint that ``latest_checkpoint`` would pick up.

The learner makes the files' bytes (``kilorl.roles.checkpoint_format``) and the driver
writes them (``write_checkpoint``), so a training run's driver never imports torch; reading
a checkpoint back (``load_checkpoint``: a resume, an evaluation) imports it when called.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kilorl.core import CheckpointFiles
from kilorl.roles.checkpoint_format import (
    EXTRA_PREFIX,
    MODEL_FILE,
    POLICIES_DIR,
    STATE_FILE,
    checkpoint_files,
    unflatten_optimizer,
)

PREFIX = "step_"
BEST = "best"
"""The checkpoint directory that ``evaluation.keep_best`` writes and replaces."""


def write_checkpoint(run_dir: Path, ckpt: CheckpointFiles, meta: dict[str, Any], keep: int = 3,
                     name: str | None = None) -> Path:
    """Write a checkpoint for ``meta['env_steps']`` from its files' bytes; keep the newest ``keep``.

    ``name``: a fixed directory name instead of ``step_<env_steps>`` (``best``), replaced in
    place and outside the rotation.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / (name or f"{PREFIX}{int(meta['env_steps']):012d}")
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for file_name, data in ckpt.files.items():
        (tmp / file_name).parent.mkdir(parents=True, exist_ok=True)  # a policy's part: policies/<name>/
        (tmp / file_name).write_bytes(data)
    (tmp / "meta.json").write_text(json.dumps({**meta, **ckpt.meta}, indent=1))
    if final.exists():  # aside first: until the new one is in place, the old one is still whole
        aside = root / f".old-{final.name}-{os.getpid()}"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(final, aside)
        os.replace(tmp, final)
        shutil.rmtree(aside)
    else:
        os.replace(tmp, final)
    if name is not None:
        return final
    for old in sorted(p for p in root.iterdir() if p.name.startswith(PREFIX))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save_checkpoint(run_dir: Path, learner_state: dict[str, Any], meta: dict[str, Any], keep: int = 3) -> Path:
    """``write_checkpoint`` of a learner's ``state()`` held in this process (imports torch)."""
    return write_checkpoint(run_dir, checkpoint_files(learner_state), meta, keep)


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / "meta.json").exists())
    return found[-1] if found else None


def best_checkpoint(run_dir: Path) -> Path | None:
    """The run's ``evaluation.keep_best`` checkpoint, if it wrote one."""
    path = Path(run_dir) / "checkpoints" / BEST
    return path if (path / "meta.json").is_file() else None


def resolve_checkpoint(path: Path) -> Path:
    """Accept a checkpoint directory or a run directory: its ``best`` checkpoint when the run
    kept one (``evaluation.keep_best``), else its newest."""
    path = Path(path)
    if (path / "meta.json").is_file() and ((path / MODEL_FILE).is_file() or (path / POLICIES_DIR).is_dir()):
        return path
    ckpt = best_checkpoint(path) or latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"{path}: neither a checkpoint nor a run directory with checkpoints")
    return ckpt


def select_checkpoint(run_dir: Path, which: str) -> Path:
    """One checkpoint of a run by name: ``best`` (``evaluation.keep_best``), ``latest``, or
    ``step_N`` (the one written at ``N`` env steps). ``FileNotFoundError`` says what the run has."""
    run_dir = Path(run_dir)
    if which == BEST:
        found = best_checkpoint(run_dir)
        why = "no best checkpoint (the run needs evaluation.keep_best: true and evaluation.every_env_steps)"
    elif which == "latest":
        found, why = latest_checkpoint(run_dir), "no checkpoint"
    elif which.startswith(PREFIX) and which[len(PREFIX):].isdigit():
        path = run_dir / "checkpoints" / f"{PREFIX}{int(which[len(PREFIX):]):012d}"
        found, why = (path if (path / "meta.json").is_file() else None), f"no checkpoint at {which[len(PREFIX):]} env steps"
    else:
        raise ValueError(f"--checkpoint {which!r}: expected best, latest or step_N (N env steps)")
    if found is None:
        root = run_dir / "checkpoints"
        have = sorted(int(p.name.removeprefix(PREFIX)) for p in root.iterdir()
                      if p.name.startswith(PREFIX) and (p / "meta.json").is_file()) if root.is_dir() else []
        steps = ", ".join(f"{PREFIX}{n}" for n in have) or "none"
        raise FileNotFoundError(f"{run_dir}: {why}; its step checkpoints: {steps}")
    return found


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(learner_state, meta)`` as saved by ``save_checkpoint``; a run of several
    policies gives ``{"policies": {name: learner_state}}`` (``kilorl.roles.policy_learners``)."""
    ckpt = resolve_checkpoint(path)
    meta = json.loads((ckpt / "meta.json").read_text())
    if POLICIES_DIR in meta:
        return {POLICIES_DIR: {name: _learner_state(ckpt / POLICIES_DIR / name, part)
                               for name, part in meta[POLICIES_DIR].items()}}, meta
    return _learner_state(ckpt, meta), meta


def load_policy_checkpoint(path: Path, policy: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One policy's part of a checkpoint of several policies, as ``load_checkpoint`` gives a
    single-policy one; a KeyError naming the policies the checkpoint holds."""
    state, meta = load_checkpoint(path)
    parts = state.get(POLICIES_DIR)
    if parts is None:
        raise KeyError(f"{path}: a checkpoint of one policy, it has no part for policy {policy!r}")
    if policy not in parts:
        raise KeyError(f"{path}: no part for policy {policy!r}; it holds {sorted(parts)}")
    return parts[policy], meta


def _learner_state(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """A learner's ``state()`` from the files ``checkpoint_files`` made, in ``folder``."""
    from safetensors.torch import load_file

    model = load_file(str(folder / MODEL_FILE))
    extra = load_file(str(folder / STATE_FILE))
    return {
        "model": model,
        "optimizer": unflatten_optimizer(extra, meta["optimizer"]),
        "obs_rms": {k.split("/", 1)[1]: v.numpy() for k, v in extra.items() if k.startswith("obs_rms/")},
        "ret_rms": {k.split("/", 1)[1]: v.numpy() for k, v in extra.items() if k.startswith("ret_rms/")},
        "torch_rng": extra["torch_rng"],
        "updates": meta["updates"],
        "tensors": {k[len(EXTRA_PREFIX):]: v for k, v in extra.items() if k.startswith(EXTRA_PREFIX)},
        "extra_meta": meta.get("algorithm", {}),
    }


class Checkpointer:
    """When to checkpoint (every ``every_env_steps`` and at the end) and the writing itself."""

    def __init__(self, run_dir: Path, every_env_steps: int | None, keep: int, config_json: dict[str, Any],
                 env_steps: int) -> None:
        self.run_dir, self.every, self.keep, self.config_json = Path(run_dir), every_env_steps, keep, config_json
        self.next_due = (env_steps // every_env_steps + 1) * every_env_steps if every_env_steps else None
        self.last_path: Path | None = None
        self.best_path: Path | None = None
        self.last_steps = -1

    def due(self, env_steps: int) -> bool:
        return self.next_due is not None and env_steps >= self.next_due

    def save_best(self, ckpt: CheckpointFiles, meta: dict[str, Any]) -> Path:
        """Write ``checkpoints/best`` (outside the cadence and the rotation)."""
        self.best_path = write_checkpoint(self.run_dir, ckpt, {**meta, "config": self.config_json}, name=BEST)
        return self.best_path

    def save(self, ckpt: CheckpointFiles, meta: dict[str, Any]) -> Path:
        """Write the learner's checkpoint files with the run's counters and config."""
        self.last_path = write_checkpoint(self.run_dir, ckpt, {**meta, "config": self.config_json}, self.keep)
        self.last_steps = int(meta["env_steps"])
        while self.next_due is not None and self.next_due <= self.last_steps:
            self.next_due += self.every  # type: ignore[operator]
        return self.last_path
