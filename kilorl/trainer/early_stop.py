"""A run that ends before its env-step budget says so: in its result, its metrics and its exit code.

Every early stop (a leaking role that could not be moved nor restarted, learners lost past
their restores, a store that could not be recovered, actors lost past their restarts, roles
killed by Ray's out-of-memory killer) becomes one :class:`EarlyStop`. The
trainer appends it to ``metrics.jsonl`` as the run's last row (``stopped``,
``stop_reason``, ``resume``), ``kilorl top`` shows that row once the run has ended, and
``kilorl train`` ends with that row as one line (:func:`describe_row`) and exit code :data:`EXIT_STOPPED`
instead of ``done: ...`` and 0, so neither a user nor a script mistakes it for a finished run.

Kept free of Ray and torch: the driver and ``kilorl top`` import it cheaply.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

EXIT_STOPPED = 3
"""``kilorl train``'s exit code for a run that stopped before its env-step budget (README, "Exit codes")."""

KINDS = ("migration", "learners_lost", "store_lost", "actors_lost", "out_of_memory")
"""Why a run stops early: a role not moved, learners lost past their restores, a store not recovered,
actors lost past their restarts, role processes killed by Ray because the node ran out of memory."""

T = TypeVar("T")


@dataclass(frozen=True)
class EarlyStop:
    """One early stop, as the run's last metrics row and the command line's last line report it."""

    kind: str
    """One of :data:`KINDS`."""
    reason: str
    env_steps: int
    """Env steps the run reached (consumed by the learners)."""
    total_env_steps: int
    """The run's budget (``train.total_env_steps``)."""
    iteration: int
    run_dir: str
    resume_command: str
    """What continues the run to its budget (``resume_command``)."""

    def last_line(self) -> str:
        return describe_row(self.row())

    def row(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps, "iteration": self.iteration, "total_env_steps": self.total_env_steps,
                "stopped": self.kind, "stop_reason": self.reason, "resume": self.resume_command}


def resume_command(run_dir: str | Path) -> str:
    """``kilorl train --resume RUN_DIR`` from the newest checkpoint; without one, the run starts again."""
    from kilorl.trainer.checkpoint import latest_checkpoint

    if latest_checkpoint(Path(run_dir)) is not None:
        return f"kilorl train --resume {shlex.quote(str(run_dir))}"
    return (f"kilorl train {shlex.quote(str(Path(run_dir) / 'config.yaml'))} (no checkpoint to resume from: "
            "set checkpoint.every_env_steps)")


def record(stop: EarlyStop) -> None:
    """Append the stop as the last row of the run's ``metrics.jsonl`` (the writer has closed it)."""
    with (Path(stop.run_dir) / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(stop.row()) + "\n")


def last_row(run_dir: str | Path) -> dict[str, Any] | None:
    """The last row of ``metrics.jsonl`` (None without one); read from the end, the file may be long."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return None
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 65536))
        lines = [x for x in f.read().splitlines() if x.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:  # a row being written
        return None


def stopped_row(run_dir: str | Path) -> dict[str, Any] | None:
    """The early-stop row the run ended with, if it stopped early."""
    row = last_row(run_dir)
    return row if row is not None and row.get("stopped") else None


def describe_row(row: dict[str, Any]) -> str:
    """An early-stop row as one line (``kilorl train``'s last line; what ``kilorl top`` prints)."""
    return (f"stopped early ({row['stopped']}): {row.get('stop_reason', '')}; reached {row.get('env_steps')} of "
            f"{row.get('total_env_steps')} env steps; resume with: {row.get('resume', '')}")


def kind_of(err: BaseException) -> str | None:
    """The early-stop kind of an error that ends a run, None for an error that is a bug or a bad start."""
    from kilorl.params.reconnect import ParametersLost
    from kilorl.store.errors import StoreError
    from kilorl.trainer.loop_errors import LearnerLost

    if isinstance(err, LearnerLost):
        return "learners_lost"
    if isinstance(err, (ParametersLost, StoreError)):
        return "store_lost"
    ray = sys.modules.get("ray")  # a Ray error can only come from a run that imported Ray
    if ray is not None:
        if isinstance(err, ray.exceptions.OutOfMemoryError):
            return "out_of_memory"
        if isinstance(err, ray.exceptions.RayActorError):
            return "actors_lost"
    return None


def recorded(run_dir: Path, total_env_steps: int, train: Callable[[], T]) -> T:
    """Runs ``train``; a result with ``stopped`` set, or an error that ends the run early
    (``kind_of``; raised on), becomes the run's last metrics row."""
    try:
        result = train()
    except Exception as err:
        kind = kind_of(err)
        if kind is not None:
            env_steps, iteration = _counters(run_dir)
            record(EarlyStop(kind, _one_line(err), env_steps, total_env_steps, iteration, str(run_dir),
                             resume_command(run_dir)))
        raise
    stopped = getattr(result, "stopped", None)
    if stopped is not None:
        env_steps, iteration = _counters(run_dir)
        record(EarlyStop("migration", stopped, int(getattr(result, "env_steps", env_steps)), total_env_steps,
                         iteration, str(run_dir), resume_command(run_dir)))
    return result


def _counters(run_dir: Path) -> tuple[int, int]:
    """(env steps, iteration) the run reached: its last metrics row or its newest checkpoint, the later."""
    from kilorl.trainer.checkpoint import latest_checkpoint

    row = last_row(run_dir) or {}
    best = (int(row.get("env_steps", 0)), int(row.get("iteration", 0)))
    ckpt = latest_checkpoint(Path(run_dir))
    if ckpt is not None:
        meta = json.loads((ckpt / "meta.json").read_text())
        best = max(best, (int(meta.get("env_steps", 0)), int(meta.get("iteration", 0))))
    return best


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
