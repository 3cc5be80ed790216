"""Value types of the client API (write modes, versioned reads) and token resolution."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Any, NamedTuple

from kilorl.store.wire.protocol import is_loopback
from kilorl.store.wire.rundir import default_run_dir


class WriteMode(enum.Enum):
    """Durability of a ``set``."""

    NONE_L2 = "none"
    """Memory tiers only."""
    WRITE_THROUGH_L2 = "through"
    """Written and fsynced to the worker's L2 directory before ``set`` returns."""
    WRITE_BACK_L2 = "back"
    """Acknowledged at once, flushed to L2 by a bounded queue (and on clean shutdown)."""


class Versioned(NamedTuple):
    version: int
    value: Any


def resolve_token(token: str | None, host: str, port: int, run_dir: str | None) -> str | None:
    """The token given, else ``KILORL_STORE_TOKEN``, else the run directory's (local workers)."""
    if token:
        return token
    if os.environ.get("KILORL_STORE_TOKEN"):
        return os.environ["KILORL_STORE_TOKEN"]
    if is_loopback(host) or run_dir:
        path = Path(run_dir) if run_dir else default_run_dir(port)
        try:
            return (path / "token").read_text().strip()
        except OSError:
            return None
    return None
