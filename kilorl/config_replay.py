"""The ``replay_buffer`` section: where a replay algorithm's table lives and how it is kept.

Without the section a replay algorithm keeps its table in its learner's process. With it
(the users' ``replay_buffer: {sharding: true, compression: zstd}`` as written) the table
lives in the run's store workers (``kilorl.store`` replay tables), sampled through the same
``ReplaySource`` calls. See docs/architecture.md, "Data paths".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kilorl.config_section import Section


class OfflineDataConfig(Section):
    """Recorded data mixed into every sampled batch (``kilorl record`` writes such datasets)."""

    path: str
    """Directory of a dataset in Minari's format (its root, or its ``data/``)."""
    ratio: float = Field(default=0.5, ge=0, le=1)
    """Share of every batch drawn from the recorded rows: exactly ``round(ratio * batch_size)``."""


class ReplayBufferConfig(Section):
    """A replay algorithm's table on the store workers."""

    backend: Literal["store", "learner"] = "store"
    """``store``: the table lives in the run's store workers; ``learner``: in the learner's
    process (what a run without this section does)."""
    capacity: int | None = Field(default=None, ge=1)
    """Rows kept, all shards together (None: the algorithm's ``buffer_size``)."""
    sharding: bool = True
    """One shard per store worker (samples drawn from all, in proportion to their rows);
    False: one shard, on the learner's own node's worker."""
    shards: int | None = Field(default=None, ge=1)
    """At most this many shards (None: one per store worker with ``sharding``)."""
    compression: Literal["none", "zstd", "lz4"] = "none"
    """Codec of the stored columns; columns under 64 bytes per row stay raw whatever it is."""
    compression_level: int = 3
    """The codec's level (zstd 1-22, lz4 0-16)."""
    chunk_length: int = Field(default=16, ge=1)
    """Rows per compressed chunk (more compress better; a sample decodes a chunk per row)."""
    offline: OfflineDataConfig | None = None
    """Recorded data mixed into every batch at a fixed share, kept in the learner's process in
    a table of its own that online inserts never evict (None: online data only)."""
