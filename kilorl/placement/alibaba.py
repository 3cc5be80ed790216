"""Readers for the Alibaba ``cluster-trace-gpu-v2023`` CSV format (FGD paper, ATC'23).

Nodes: ``sn, cpu_milli, memory_mib, gpu, model``. Pods: ``name, cpu_milli, memory_mib,
num_gpu, gpu_milli`` and optionally ``gpu_spec`` (allowed models joined by ``|``),
``creation_time``, ``deletion_time`` (seconds). ``gpu_milli`` is the share of one device
for a sharing pod (``num_gpu == 1``); multi-GPU pods take whole devices. The trace has no
NVLink/PCIe/switch data: every device is its own island, ``nodes_per_leaf`` nodes per leaf.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from kilorl.placement.links import DEFAULT_LINKS
from kilorl.placement.requests import Demand
from kilorl.placement.topology import Gpu, Node, Topology

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A malformed trace file; the message names the file, line and column."""


@dataclass(frozen=True)
class TracePod:
    name: str
    demand: Demand
    creation: float
    """Arrival time (s); row order when the file has no times."""
    deletion: float | None
    """Departure time (s); None: never leaves."""


def _rows(path: Path, required: tuple[str, ...]):
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}; header is {reader.fieldnames}")
        yield from enumerate(reader, start=2)


def _int(path: Path, line: int, row: dict, col: str, default: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    if raw == "" and default is not None:
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise TraceError(f"{path}:{line}: column {col!r} must be a number (got {raw!r})") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: column {col!r} must be >= 0 (got {value})")
    return value


def read_nodes(path: str | Path, nodes_per_leaf: int = 32) -> Topology:
    """The trace's node list as a topology (no NVLink: the trace does not record it)."""
    p = Path(path)
    nodes = []
    for line, row in _rows(p, NODE_COLUMNS):
        ngpu = _int(p, line, row, "gpu")
        model = (row["model"] or "").strip()
        if ngpu and not model:
            raise TraceError(f"{p}:{line}: column 'model' is empty for a node with GPUs")
        gpus = tuple(Gpu(i, model, 0.0, island=i, numa=0, pcie_switch=i) for i in range(ngpu))
        k = len(nodes)
        leaf = f"leaf{k // nodes_per_leaf}"
        nodes.append(Node(row["sn"], _int(p, line, row, "cpu_milli") / 1000.0, _int(p, line, row, "memory_mib") / 1024.0,
                          gpus, (), leaf, leaf))
    if not nodes:
        raise TraceError(f"{p}: no nodes")
    return Topology(p.stem, tuple(nodes), dict(DEFAULT_LINKS))


def read_pods(path: str | Path) -> list[TracePod]:
    """Pods in arrival order (stable for equal times)."""
    p = Path(path)
    pods = []
    for line, row in _rows(p, POD_COLUMNS):
        num_gpu = _int(p, line, row, "num_gpu")
        milli = _int(p, line, row, "gpu_milli", default=1000 if num_gpu else 0)
        if num_gpu > 1:
            if milli not in (0, 1000):
                raise TraceError(f"{p}:{line}: column 'gpu_milli' is {milli} for a {num_gpu}-GPU pod (whole devices only)")
            milli = 1000
        elif num_gpu == 1 and not 0 < milli <= 1000:
            raise TraceError(f"{p}:{line}: column 'gpu_milli' must be in 1..1000 for a 1-GPU pod (got {milli})")
        elif num_gpu == 0:
            milli = 0
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(s for s in spec.split("|") if s) if spec and num_gpu else None
        created = _int(p, line, row, "creation_time", default=line - 2)
        raw_del = (row.get("deletion_time") or "").strip()
        deleted = _int(p, line, row, "deletion_time") if raw_del else None
        if deleted is not None and deleted < created:
            raise TraceError(f"{p}:{line}: deletion_time {deleted} is before creation_time {created}")
        demand = Demand(num_gpu, milli, _int(p, line, row, "cpu_milli"), _int(p, line, row, "memory_mib"), models)
        pods.append(TracePod(row["name"], demand, float(created), None if deleted is None else float(deleted)))
    pods.sort(key=lambda x: x.creation)
    return pods
