"""Where metrics go: metrics.jsonl, TensorBoard and a live progress bar.

TensorBoard events are written by a background thread with TensorBoard's own event-file
writer, not torch's ``SummaryWriter``: the driver never imports torch (1.4 s of CPU that would
compete with the roles; ``kilorl.roles.checkpoint_format``). The writer's import (0.2 s) runs
on that thread too, so neither start-up nor a report waits for it.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class _TensorBoardThread:
    """Scalars go into a queue; the thread imports the writer once and drains the queue."""

    def __init__(self, log_dir: Path) -> None:
        self._queue: queue.Queue[tuple[dict[str, float], int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(log_dir,), name="kilorl-tensorboard", daemon=True)
        self._thread.start()

    def _run(self, log_dir: Path) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        writer = EventFileWriter(str(log_dir))
        try:
            while (item := self._queue.get()) is not None:
                scalars, step = item
                values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]
                writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))
        finally:
            writer.close()

    def add(self, scalars: dict[str, float], step: int) -> None:
        self._queue.put((scalars, step))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


class MetricsWriter:
    """One ``report`` = one JSON line, one set of TensorBoard scalars, one bar refresh."""

    def __init__(self, run_dir: Path, total_env_steps: int, tensorboard: bool = True, progress: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = self.path.open("a", buffering=1)
        self._tb = _TensorBoardThread(Path(run_dir) / "tb") if tensorboard else None
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), disable=not progress, transient=False,
        )
        self._task = self._progress.add_task("env steps", total=total_env_steps, info="")
        self._progress.start()

    def report(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self._file.write(json.dumps(clean) + "\n")
        step = int(row["env_steps"])
        if self._tb is not None:
            self._tb.add({k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                          and k != "env_steps" and math.isfinite(v)}, step)
        ret = row.get("episode_return_mean")
        info = f"{row.get('sps', 0):,.0f} SPS" + (f"  return {ret:.1f}" if ret is not None else "")
        self._progress.update(self._task, completed=step, info=info)

    def close(self) -> None:
        self._progress.stop()
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
