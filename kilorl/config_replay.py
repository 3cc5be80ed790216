"""The ``replay_buffer`` section: where a replay algorithm's table lives and how it is kept.

Without the section a replay algorithm keeps its table in its learner's process. With it
(the users' ``replay_buffer: {sharding: true, compression: zstd}`` as written) the table
lives in the run's store workers (``kilorl.store`` replay tables), sampled through the same
``ReplaySource`` calls. See docs/architecture.md, "Data paths".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kilorl.config_section import Section


class PrioritizedConfig(Section):
    """Prioritized replay (Schaul et al. 2016): rows drawn with probability ∝ priority ** alpha,
    their loss weighted by ``(N * P(i)) ** -beta`` (divided by the batch's largest weight)."""

    alpha: float = Field(default=0.6, ge=0, le=10)
    """Priority exponent (0: uniform)."""
    beta: float = Field(default=0.4, ge=0, le=1)
    """Importance-sampling exponent at the start of the run."""
    beta_final: float = Field(default=1.0, ge=0, le=1)
    """Importance-sampling exponent at the end of the run (linear in env steps from ``beta``)."""
    epsilon: float = Field(default=1e-6, gt=0)
    """Added to every |TD error| before it becomes a priority, so no row is never drawn again."""

    def beta_at(self, progress: float) -> float:
        """The exponent after ``progress`` (0..1) of the run's env steps."""
        return self.beta + (self.beta_final - self.beta) * min(1.0, max(0.0, progress))


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
    """Rows kept, all shards together (None: the algorithm's ``buffer_size``). A worker refuses
    a table whose ``capacity x bytes per row`` does not fit in its memory, naming both numbers."""
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
    prioritized: PrioritizedConfig | None = None
    """Prioritized sampling by |TD error| with importance weights; None: uniform."""
    samples_per_insert: float | None = Field(default=None, gt=0)
    """Rows sampled per row inserted, kept by the table's rate limiter; the learner takes the
    gradient steps it allows (``samples_per_insert / algo.batch_size`` per inserted row),
    in place of the algorithm's own ratio (DQN's ``gradient_steps`` per ``train_freq``).
    None: the algorithm's ratio, no limiter."""
    min_size_to_sample: int | None = Field(default=None, ge=1)
    """Rows the table holds before the first sample (None: 1; the algorithm's
    ``learning_starts`` still applies)."""
    frame_stack: int | None = Field(default=None, ge=2)
    """Observations are stacks of this many frames (``[frame_stack, ...]``, the env's
    FrameStackObservation): the table keeps each distinct frame once and rebuilds the
    stacks when it samples. None: rows are kept as they are."""
    durable: bool = False
    """Every chunk written back to its store worker's L2 directory (``WRITE_BACK_L2``), so a
    worker that dies (kill -9, OOM) and is restarted serves every flushed chunk again."""
    n_step: int | None = Field(default=None, ge=1)
    """Steps of reward summed per stored transition (None: the algorithm's ``n_step``); setting
    both to different values is an error."""
    offline: OfflineDataConfig | None = None
    """Recorded data mixed into every batch at a fixed share, kept in a table of its own that
    online inserts never evict: on the store workers with ``backend: store`` (loaded once per
    run), else in the learner's process (None: online data only)."""

    @model_validator(mode="after")
    def _store_only_options(self) -> ReplayBufferConfig:
        if self.backend == "learner":
            for name in ("prioritized", "samples_per_insert", "min_size_to_sample", "frame_stack"):
                if getattr(self, name) is not None:
                    raise ValueError(f"replay_buffer.{name}: needs backend: store (the learner's own table "
                                     "samples uniformly, with no rate limiter)")
        if self.capacity is not None and self.min_size_to_sample is not None \
                and self.min_size_to_sample > self.capacity:
            raise ValueError(f"replay_buffer.min_size_to_sample: {self.min_size_to_sample} exceeds "
                             f"replay_buffer.capacity {self.capacity}: nothing could ever be sampled")
        return self

    def fit_to(self, algo: Any) -> None:
        """The section's options the algorithm (its ``algo`` section) cannot honour are errors naming
        them; ``n_step`` is handed to the algorithm's own field."""
        honoured = getattr(algo, "replay_options", ())
        for name in ("prioritized", "samples_per_insert"):
            if getattr(self, name) is not None and name not in honoured:
                raise ValueError(f"replay_buffer.{name}: algo.name={algo.name} does not support it "
                                 f"(it honours {list(honoured) or 'none of the table options'})")
        capacity = self.capacity or getattr(algo, "buffer_size", None)
        if self.min_size_to_sample is not None and capacity is not None and self.min_size_to_sample > capacity:
            raise ValueError(f"replay_buffer.min_size_to_sample: {self.min_size_to_sample} exceeds the table's "
                             f"capacity {capacity} (algo.buffer_size): nothing could ever be sampled")
        if self.n_step is not None:
            if not hasattr(algo, "n_step"):
                raise ValueError(f"replay_buffer.n_step: algo.name={algo.name} has no n-step returns")
            if "n_step" in algo.model_fields_set and algo.n_step != self.n_step:
                raise ValueError(f"replay_buffer.n_step: {self.n_step} contradicts algo.n_step={algo.n_step} "
                                 "(set one of them)")
            algo.n_step = self.n_step


def check_actorless(algo_name: str, data_path: str, replay_buffer: ReplayBufferConfig | None) -> None:
    """``parallelism.actor: 0`` trains from recorded data alone: only a replay algorithm can,
    and only with every row of every batch recorded (``replay_buffer.offline.ratio: 1.0``)."""
    if data_path != "replay":
        raise ValueError(f"parallelism.actor=0: algo.name={algo_name} is on the {data_path} data path, which "
                         "trains on its env runners' rollouts (only a replay algorithm trains from "
                         "replay_buffer.offline alone)")
    offline = replay_buffer.offline if replay_buffer is not None else None
    if offline is None:
        raise ValueError("parallelism.actor=0: no env runner and no replay_buffer.offline dataset: "
                         "the run would have nothing to train on")
    if offline.ratio != 1.0:
        raise ValueError(f"parallelism.actor=0: replay_buffer.offline.ratio={offline.ratio} leaves "
                         f"{1 - offline.ratio:g} of every batch to online rows, and no env runner makes any "
                         "(set ratio: 1.0)")
