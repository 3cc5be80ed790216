"""Where a worker keeps its run files (Unix socket, token, pid): known to worker and client alike."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def default_run_dir(port: int) -> Path:
    """The run directory of the worker on ``port`` when none is configured (per user)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"kilorl-store-{os.getuid()}-{port}"
