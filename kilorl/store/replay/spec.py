"""A table's definition as both sides exchange it: columns, capacity, codec, sampler, limiter.

Travels as a plain dict (msgpack) in request headers, never pickled. Every check names the
field it refuses, so a client's mistake reads the same whichever side found it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kilorl.store.errors import InvalidRequest

CODECS = ("none", "zstd", "lz4")
PACKED_MIN_ROW_BYTES = 64
"""A column of a compressed table is compressed only when one row of it holds at least this
many bytes: below, a codec saves next to nothing and costs a decode for every sampled row."""
SAMPLERS = ("uniform", "prioritized")


@dataclass(frozen=True)
class ColumnSpec:
    """One column: every row holds one array of ``shape`` and ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    """A numpy dtype string (``float32``, ``uint8``, ...); byte order is native."""

    @property
    def row_nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class LimiterSpec:
    """Reverb's sample-to-insert ratio: the faster side blocks while the other catches up."""

    samples_per_insert: float | None = None
    """Sampled rows per inserted row the limiter keeps to; None: no limit on either side."""
    min_size_to_sample: int = 1
    """Rows the table must hold before any sample is served."""
    tolerance: float | None = None
    """How far (in sampled rows) the count may stray from the target either way; None picks
    ``max(1, samples_per_insert)`` (the least that lets both sides always make progress)."""


@dataclass(frozen=True)
class TableSpec:
    """Everything a worker needs to create a table."""

    name: str
    columns: tuple[ColumnSpec, ...]
    capacity: int
    """Rows kept; the oldest go first (FIFO) once full."""
    compression: str = "none"
    """Codec of every stored column: ``none``, ``zstd`` or ``lz4``."""
    compression_level: int = 3
    """The codec's level (zstd 1-22; lz4 0-16)."""
    chunk_length: int = 16
    """Rows per encoded chunk of a compressed table: a client cuts an insert into chunks of
    this many rows (more compress better; a sample decodes a whole chunk per row it takes,
    but of a ``stacked`` column only the row's frames)."""
    sampler: str = "uniform"
    """``uniform`` or ``prioritized`` (probability ∝ priority ** ``alpha``)."""
    alpha: float = 0.6
    """Priority exponent of the prioritized sampler."""
    limiter: LimiterSpec = field(default_factory=LimiterSpec)
    seed: int = 0
    """Seed of the table's sampling generator."""
    stacked: tuple[str, ...] = ()
    """Columns whose rows are stacks of frames along their first axis (``[k, ...]``: an
    Atari observation of the last ``k`` frames). Each chunk keeps the distinct frames of such
    columns once, shared by the columns of one frame shape and dtype (``stack_groups``: obs
    and next_obs), each frame encoded on its own; a sample decodes only the frames of its rows
    and rebuilds the stacks bit for bit (``codec.encode_stack_group``); kept encoded whatever
    ``compression``."""
    durable: bool = False
    """Every inserted chunk is written back to the worker's L2 directory (``WRITE_BACK_L2``:
    asynchronously, in the order of inserts), so a restarted worker serves every flushed
    chunk again; needs a worker started with ``--l2-dir``."""

    def packed(self, column: ColumnSpec) -> bool:
        """Whether ``column`` is kept encoded (else raw in the table's ring of rows)."""
        return column.name in self.stacked or (self.compression != "none"
                                               and column.row_nbytes >= PACKED_MIN_ROW_BYTES)

    def stack_groups(self) -> list[tuple[str, ...]]:
        """The ``stacked`` columns grouped by frame shape and dtype, in ``stacked`` order: a
        group shares one pool of frames per chunk, held in its first column's encoded bytes."""
        groups: dict[tuple[Any, ...], list[str]] = {}
        for name in self.stacked:
            c = self.column(name)
            groups.setdefault((c.shape[1:], c.dtype), []).append(name)
        return [tuple(g) for g in groups.values()]

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def row_nbytes(self) -> int:
        return sum(c.row_nbytes for c in self.columns)

    def to_wire(self) -> dict[str, Any]:
        lim = self.limiter
        return {"name": self.name, "capacity": self.capacity, "compression": self.compression,
                "compression_level": self.compression_level, "chunk_length": self.chunk_length,
                "sampler": self.sampler, "alpha": self.alpha,
                "seed": self.seed, "durable": self.durable, "stacked": list(self.stacked),
                "columns": [{"name": c.name, "shape": list(c.shape), "dtype": c.dtype} for c in self.columns],
                "limiter": {"samples_per_insert": lim.samples_per_insert,
                            "min_size_to_sample": lim.min_size_to_sample, "tolerance": lim.tolerance}}

    @classmethod
    def from_wire(cls, d: Any) -> TableSpec:
        """Validates a wire dict; ``InvalidRequest`` names the field at fault."""
        if not isinstance(d, dict):
            raise InvalidRequest(f"table: expected a dict, got {type(d).__name__}")
        unknown = set(d) - {"name", "capacity", "compression", "compression_level", "chunk_length", "sampler", "alpha", "seed",
                            "durable", "stacked", "columns", "limiter"}
        if unknown:
            raise InvalidRequest(f"table.{sorted(unknown)[0]}: unknown field")
        lim = d.get("limiter") or {}
        if not isinstance(lim, dict):
            raise InvalidRequest("table.limiter: expected a dict")
        columns = d.get("columns")
        if not isinstance(columns, list) or not columns:
            raise InvalidRequest("table.columns: expected a non-empty list of {name, shape, dtype}")
        cols = tuple(_column(c, i) for i, c in enumerate(columns))
        spec = cls(name=d.get("name"), columns=cols, capacity=d.get("capacity"),
                   compression=d.get("compression", "none"), compression_level=d.get("compression_level", 3),
                   chunk_length=d.get("chunk_length", 16),
                   sampler=d.get("sampler", "uniform"), alpha=d.get("alpha", 0.6), seed=d.get("seed", 0),
                   durable=d.get("durable", False), stacked=tuple(d.get("stacked") or ()),
                   limiter=LimiterSpec(lim.get("samples_per_insert"), lim.get("min_size_to_sample", 1),
                                       lim.get("tolerance")))
        spec.validate()
        return spec

    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 256:
            raise InvalidRequest("table.name: must be a non-empty string of at most 256 characters")
        if not isinstance(self.capacity, int) or isinstance(self.capacity, bool) or self.capacity < 1:
            raise InvalidRequest(f"table.capacity: must be a positive integer, got {self.capacity!r}")
        if self.compression not in CODECS:
            raise InvalidRequest(f"table.compression: must be one of {CODECS}, got {self.compression!r}")
        if not isinstance(self.compression_level, int):
            raise InvalidRequest(f"table.compression_level: must be an integer, got {self.compression_level!r}")
        if not isinstance(self.chunk_length, int) or self.chunk_length < 1:
            raise InvalidRequest(f"table.chunk_length: must be a positive integer, got {self.chunk_length!r}")
        if self.sampler not in SAMPLERS:
            raise InvalidRequest(f"table.sampler: must be one of {SAMPLERS}, got {self.sampler!r}")
        if not isinstance(self.alpha, (int, float)) or not 0 <= self.alpha <= 10:
            raise InvalidRequest(f"table.alpha: must be a number in [0, 10], got {self.alpha!r}")
        if not isinstance(self.seed, int):
            raise InvalidRequest(f"table.seed: must be an integer, got {self.seed!r}")
        if not isinstance(self.durable, bool):
            raise InvalidRequest(f"table.durable: must be true or false, got {self.durable!r}")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise InvalidRequest(f"table.columns: duplicate column names in {names}")
        if len(set(self.stacked)) != len(self.stacked):
            raise InvalidRequest(f"table.stacked: duplicate column names in {list(self.stacked)}")
        for name in self.stacked:
            if name not in names:
                raise InvalidRequest(f"table.stacked: {name!r} is not a column of {names}")
            if len(self.column(name).shape) < 2:
                raise InvalidRequest(f"table.stacked: column {name!r} has row shape {list(self.column(name).shape)}; "
                                     "a stack needs [k, frame...]")
        lim = self.limiter
        spi = lim.samples_per_insert
        if spi is not None and (not isinstance(spi, (int, float)) or not math.isfinite(spi) or spi <= 0):
            raise InvalidRequest(f"table.limiter.samples_per_insert: must be a positive number, got {spi!r}")
        if not isinstance(lim.min_size_to_sample, int) or lim.min_size_to_sample < 1:
            raise InvalidRequest("table.limiter.min_size_to_sample: must be a positive integer, "
                                 f"got {lim.min_size_to_sample!r}")
        if lim.min_size_to_sample > self.capacity:
            raise InvalidRequest(f"table.limiter.min_size_to_sample: {lim.min_size_to_sample} exceeds "
                                 f"table.capacity {self.capacity}: nothing could ever be sampled")
        if lim.tolerance is not None:
            least = max(1.0, spi or 1.0)
            if not isinstance(lim.tolerance, (int, float)) or not lim.tolerance >= least:
                raise InvalidRequest(f"table.limiter.tolerance: must be >= max(1, samples_per_insert) = {least} "
                                     f"so both sides can always make progress, got {lim.tolerance!r}")


def _column(c: Any, i: int) -> ColumnSpec:
    where = f"table.columns[{i}]"
    if not isinstance(c, dict) or set(c) != {"name", "shape", "dtype"}:
        raise InvalidRequest(f"{where}: expected {{name, shape, dtype}}, got {c!r}")
    name, shape, dtype = c["name"], c["shape"], c["dtype"]
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name: must be a non-empty string")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise InvalidRequest(f"{where}.shape ({name}): must be a list of non-negative integers, got {shape!r}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidRequest(f"{where}.dtype ({name}): not a numpy dtype: {dtype!r}") from None
    if dt.hasobject or dt.kind not in "biufc":
        raise InvalidRequest(f"{where}.dtype ({name}): must be a numeric dtype, got {dtype!r}")
    return ColumnSpec(name, tuple(shape), dt.name)


def make_spec(name: str, columns: dict[str, tuple[tuple[int, ...], Any]], capacity: int, **kw: Any) -> TableSpec:
    """A checked spec from ``{column: (row shape, dtype)}``; ``limiter`` may be a dict."""
    lim = kw.pop("limiter", None) or {}
    if isinstance(lim, dict):
        lim = LimiterSpec(**lim)
    cols = tuple(ColumnSpec(n, tuple(int(s) for s in shape), np.dtype(dt).name) for n, (shape, dt) in columns.items())
    spec = TableSpec(name=name, columns=cols, capacity=capacity, limiter=lim, **kw)
    spec.validate()
    return spec
