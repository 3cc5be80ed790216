"""Where metrics go: metrics.jsonl, TensorBoard and a live progress bar."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class MetricsWriter:
    """One ``report`` = one JSON line, one set of TensorBoard scalars, one bar refresh."""

    def __init__(self, run_dir: Path, total_env_steps: int, tensorboard: bool = True, progress: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = self.path.open("a", buffering=1)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tb"))
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
            for k, v in row.items():
                if isinstance(v, (int, float)) and k != "env_steps" and v is not None and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
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
