"""Fragmentation gradient of every node, cached per (node, task shape).

Why a cache: placing a pod changes one node, and the growth of ``F_n(M)`` that a task of
shape d causes on node n depends on n's free resources only. So the gradient of node n for
shape d stays valid until n changes; each node carries a version number, bumped by
``refresh``, and a shape's cached gradient is recomputed only for the candidate nodes whose
version moved since that shape was last scored. A pod thus costs one vectorised gather over
the candidate nodes plus the scoring of the few nodes that changed, instead of scoring
every node again (docs/placement.md, "Latency").

For a shared-GPU shape the device matters: each distinct free share on the node is tried
(devices with equal free share are interchangeable) and the best is kept with its device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kilorl.placement.fragmentation import Workload, host_weights, node_fragmentation
from kilorl.placement.requests import Demand
from kilorl.placement.state import CapacityState

DEDUP_ROWS = 256
"""Above this many rows to score, identical rows (e.g. empty nodes of one model) are scored once."""


def unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of one row per distinct row, each row's distinct-row number) of a 2-D integer array.

    Each row is compared as one opaque byte string: ``np.unique(key, axis=0)`` sorts a structured
    view field by field, about 6x slower on 1,213 rows of 11 columns (1.5 ms against 0.25 ms),
    and a full rescoring pays it on every candidate batch (docs/placement.md, "Latency")."""
    rows = np.ascontiguousarray(key)
    as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def paper_score(growth: np.ndarray) -> np.ndarray:
    """The FGD artifact's node score for a growth of ``F_n`` (milli): ``int(100 * sigmoid(-growth / 1000))``.

    Truncated to an integer, so nodes whose growth differs by a few tens of milli tie (and the
    tie order then decides)."""
    return (100.0 / (1.0 + np.exp(np.asarray(growth, dtype=np.float64) / 1000.0))).astype(np.int64)


@dataclass
class _ShapeCache:
    delta: np.ndarray
    device: np.ndarray
    version: np.ndarray


@dataclass
class FragScorer:
    """Current ``F_n(M)`` of every node and the cached gradient of each shape seen.

    ``refresh`` only marks nodes; their ``F_n`` is recomputed when next needed, together with
    the candidate rows of a gradient (one vectorised call instead of one per placement).
    """

    workload: Workload
    """The target workload; with ``rare_hosts``, reweighted by ``host_weights`` on the first full refresh."""
    measure: str = "paper"
    rare_hosts: bool = False
    """Count the popularity of types with rare hosts per eligible node (``fragmentation.host_weights``)."""
    paper_devices: bool = False
    """A sharing pod's device as the FGD artifact picks it: the lowest index among the devices whose
    quantised score (``paper_score``) is the node's best, instead of the lowest ``F`` then the tightest."""
    version: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    shapes: dict[Demand, _ShapeCache] = field(default_factory=dict)
    _values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _dirty: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    _state: CapacityState | None = None
    _base: Workload | None = None

    @property
    def values(self) -> np.ndarray:
        """``F_n(M)`` of every node now."""
        if self._state is not None and self._dirty.any():
            idx = np.flatnonzero(self._dirty)
            st = self._state
            self._values[idx] = self.frag(st.gpu_free[idx], st.cpu_free[idx], st.mem_free[idx], st.node_model[idx])
            self._dirty[idx] = False
        return self._values

    def frag(self, gpu: np.ndarray, cpu: np.ndarray, mem: np.ndarray, model: np.ndarray) -> np.ndarray:
        if len(gpu) <= DEDUP_ROWS:
            return node_fragmentation(gpu, cpu, mem, model, self.workload, self.measure)
        first, inverse = unique_rows(np.concatenate([gpu, cpu[:, None], mem[:, None], model[:, None]], axis=1))
        f = node_fragmentation(gpu[first], cpu[first], mem[first], model[first], self.workload, self.measure)
        return f[inverse]

    def refresh(self, state: CapacityState, nodes: np.ndarray | list[int] | None = None) -> None:
        """Recompute ``F_n`` of ``nodes`` (all when None) and invalidate their cached gradients."""
        if nodes is None or self._state is not state or len(self._values) != len(state.cpu_free):
            if self.rare_hosts and (self._state is None or self._state.topology is not state.topology):
                self._base = self._base or self.workload
                self.workload = self._base.reweighted(host_weights(self._base, state.topology))
            self._state = state
            self._values = self.frag(state.gpu_free, state.cpu_free, state.mem_free, state.node_model)
            self._dirty = np.zeros(len(state.cpu_free), dtype=bool)
            self.version = np.zeros(len(state.cpu_free), dtype=np.int64)
            self.shapes.clear()
            return
        idx = np.asarray(nodes, dtype=np.int64)
        self._dirty[idx] = True
        self.version[idx] += 1

    def gradient(self, state: CapacityState, demand: Demand, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(growth of ``F_n``, best device or -1) if one instance of ``demand`` goes to each node of ``idx``.

        Every node of ``idx`` must fit ``demand``.
        """
        sc = self.shapes.get(demand)
        if sc is None:
            n = len(state.cpu_free)
            sc = _ShapeCache(np.zeros(n), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
            self.shapes[demand] = sc
        stale = idx[sc.version[idx] != self.version[idx]]
        if len(stale):
            after, dev, now = self._after(state, demand, stale)
            sc.delta[stale] = np.round(after - now, 6)  # float noise must not break ties
            sc.device[stale] = dev
            sc.version[stale] = self.version[stale]
        return sc.delta[idx], sc.device[idx]

    def _with_now(self, state: CapacityState, idx: np.ndarray, gpu: np.ndarray, cpu: np.ndarray, mem: np.ndarray,
                  model: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``F`` of the given rows, and ``F_n`` now of ``idx``, dirty ones scored in the same call."""
        dirty = idx[self._dirty[idx]]
        if len(dirty):
            gpu = np.concatenate([gpu, state.gpu_free[dirty]])
            cpu, mem = np.concatenate([cpu, state.cpu_free[dirty]]), np.concatenate([mem, state.mem_free[dirty]])
            model = np.concatenate([model, state.node_model[dirty]])
        f = self.frag(gpu, cpu, mem, model)
        if len(dirty):
            self._values[dirty] = f[len(f) - len(dirty):]
            self._dirty[dirty] = False
            f = f[: len(f) - len(dirty)]
        return f, self._values[idx]

    def _after(self, state: CapacityState, d: Demand, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``F_n`` after one instance of ``d`` on each node of ``idx``, the device that gives it, ``F_n`` now."""
        free = state.gpu_free[idx]
        cpu, mem, model = state.cpu_free[idx] - d.cpu_milli, state.mem_free[idx] - d.mem_mib, state.node_model[idx]
        if d.num_gpus == 0 or not d.shared:
            free = free.copy()
            if d.num_gpus:
                full = free == 1000
                free[full & (np.cumsum(full, axis=1) <= d.num_gpus)] = 0
            f, now = self._with_now(state, idx, free, cpu, mem, model)
            return f, np.full(len(idx), -1, dtype=np.int64), now
        # Shared: one candidate per distinct free share >= the ask on each node.
        width = free.shape[1]
        earlier = np.tril(np.ones((width, width), dtype=bool), -1)  # [g, h]: h < g
        dup = ((free[:, :, None] == free[:, None, :]) & earlier[None]).any(axis=2)
        rows, devs = np.nonzero((free >= d.gpu_milli) & ~dup)
        cand = free[rows].copy()
        cand[np.arange(len(rows)), devs] -= d.gpu_milli
        f, now = self._with_now(state, idx, cand, cpu[rows], mem[rows], model[rows])
        if self.paper_devices:
            order = np.lexsort((devs, -paper_score(f - now[rows]), rows))
        else:
            # Per node the lowest F, then the tightest device (least free share), then the lowest index.
            order = np.lexsort((devs, free[rows, devs], np.round(f, 6), rows))
        first = order[np.r_[True, rows[order][1:] != rows[order][:-1]]]
        return f[first], devs[first], now
