"""A sample's packed columns out of the table's encoded chunks, outside the table's lock.

Each touched chunk of a packed column is decoded once and only its sampled rows copied out.
Frame-stack columns (``TableSpec.stacked``) keep each frame encoded on its own, one pool per
chunk shared by the columns of a ``stack_groups`` group: a sample numbers the frames its rows
name across the touched chunks and decodes each distinct one once, so a batch of B rows costs
at most B x (k + 1) frame decodes for obs and next_obs (fewer when rows share frames), never
whole chunks. It leaves them as frames and indices (``FrameSample``): a worker's reply
carries each frame once, and the client stacks them (``decode_sample``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kilorl.store.replay import codec
from kilorl.store.replay.spec import ColumnSpec, TableSpec


@dataclass
class Chunk:
    """An encoded chunk kept by a compressed table."""

    key: str
    rows: int
    blobs: dict[str, tuple[str, bytes]]
    """column -> (codec, encoded bytes)."""
    live: int
    nbytes: int
    first_id: int
    pools: dict[str, codec.FramePool]
    """stacked column -> its frames, parsed once (views of ``blobs``)."""


@dataclass
class FrameSample:
    """A stack group's sampled rows as frames: each distinct frame once, and each column's
    ``[B, k]`` indices into them (``frames[index[name]]`` are the column's stacks)."""

    columns: tuple[str, ...]
    frames: np.ndarray
    index: dict[str, np.ndarray]

    def stacks(self) -> dict[str, np.ndarray]:
        return {name: self.frames[self.index[name]] for name in self.columns}


def gather(spec: TableSpec, packed: list[ColumnSpec], chunks: list[Chunk], inverse: np.ndarray,
           offsets: np.ndarray) -> tuple[dict[str, np.ndarray], list[FrameSample]]:
    """The sampled rows of the packed columns but the frame-stack ones: each touched chunk
    decoded once, and only its sampled rows copied out; and each stack group's sampled
    frames, only the distinct frames of the sampled rows decoded (``gather_stacks``)."""
    order = np.argsort(inverse, kind="stable")  # sample positions grouped by chunk
    bounds = np.searchsorted(inverse[order], np.arange(len(chunks) + 1))
    out = {}
    pools = [gather_stacks(spec, group, chunks, order, bounds, offsets) for group in spec.stack_groups()]
    for col in packed:
        if col.name in spec.stacked:
            continue
        dest = np.empty((len(inverse), *col.shape), col.dtype)
        for j, ch in enumerate(chunks):
            pos = order[bounds[j]:bounds[j + 1]]
            name, blob = ch.blobs[col.name]
            raw = codec.decompress(blob, name, ch.rows * col.row_nbytes)
            dest[pos] = np.frombuffer(raw, col.dtype).reshape(ch.rows, *col.shape)[offsets[pos]]
        out[col.name] = dest
    return out, pools


def gather_stacks(spec: TableSpec, group: tuple[str, ...], chunks: list[Chunk], order: np.ndarray,
                  bounds: np.ndarray, offsets: np.ndarray) -> FrameSample:
    """A group of frame-stack columns' sampled rows (they share each chunk's frames): the
    frames the rows name, numbered across the touched chunks, each decoded once (obs and
    next_obs, and rows of one chunk, share frames), and where each row's stack finds them."""
    cols = [spec.column(name) for name in group]
    owners = [ch.pools[group[0]].owner for ch in chunks]
    base = np.zeros(len(chunks) + 1, np.int64)
    base[1:] = np.cumsum([p.frames for p in owners])
    widths = np.cumsum([0] + [c.shape[0] for c in cols])
    refs = np.empty((len(offsets), int(widths[-1])), np.int64)
    for j, ch in enumerate(chunks):
        pos = order[bounds[j]:bounds[j + 1]]
        for name, lo, hi in zip(group, widths[:-1], widths[1:], strict=True):
            refs[pos, lo:hi] = ch.pools[name].index[offsets[pos]] + base[j]
    uniq, inv = np.unique(refs, return_inverse=True)
    inv = inv.reshape(refs.shape)
    owner = np.searchsorted(base, uniq, side="right") - 1
    frames = np.empty((len(uniq), *cols[0].shape[1:]), cols[0].dtype)
    cuts = np.flatnonzero(np.diff(owner)) + 1  # uniq is sorted: each chunk's frames are one run
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(uniq)].tolist(), strict=True):
        j = int(owner[lo])
        owners[j].decode((uniq[lo:hi] - base[j]).tolist(), frames[lo:hi])
    index = inv.astype(np.int32)
    return FrameSample(group, frames, {name: index[:, lo:hi] for name, lo, hi in
                                       zip(group, widths[:-1], widths[1:], strict=True)})
