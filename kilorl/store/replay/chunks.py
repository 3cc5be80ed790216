"""What an arriving chunk is: how each column is encoded, and the checked, decoded chunk.

Shared by the table (which stores chunks) and the durable log (which writes them to L2 and
reads them back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kilorl.store.replay.codec import FramePool


@dataclass
class ColumnPart:
    """How one column of an arriving chunk is encoded: codec, encoded and raw byte counts."""

    name: str
    codec: str
    nbytes: int
    raw_nbytes: int


@dataclass
class Decoded:
    """An arriving chunk, checked: its decoded columns, and what a compressed table keeps."""

    key: str
    rows: int
    columns: dict[str, np.ndarray]
    """The decoded columns, but the stacked ones (their frames are in ``pools``)."""
    blobs: dict[str, tuple[str, bytes]]
    pools: dict[str, FramePool] = field(default_factory=dict)
    """stacked column -> its frames, parsed (views of ``blobs``) and checked."""


class ChunkLog(Protocol):
    """Where a durable table's chunks go (the worker's L2: ``server/replay_durable.py``). The
    table calls ``record``, ``adopt`` and ``evict_before`` under its lock, ``write`` after."""

    def record(self, first_id: int, chunk: Decoded) -> Any: ...

    def adopt(self, first_id: int, rows: int, key: str) -> None: ...

    def evict_before(self, oldest_live_id: int) -> list[str]: ...

    def write(self, pending: list[Any], evicted: list[str]) -> None: ...

    def stats(self) -> dict[str, int]: ...
