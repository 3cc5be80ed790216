"""Fixtures of the cluster tests: small topologies, NVML recordings, trace snippets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def recording():
    """Load an NVML recording from fixtures/ by file name."""
    return lambda name: json.loads((FIXTURES / name).read_text())


@pytest.fixture
def small_topology_dict() -> dict:
    """4 nodes x 4 GPUs in two NVLink pairs, 2 nodes per leaf, rack failure domains per node."""
    return {
        "name": "small",
        "node_types": {
            "box": {
                "cpus": 32,
                "memory_gb": 256,
                "numa_domains": 2,
                "gpus": {"model": "A100", "count": 4, "memory_gb": 40, "islands": [[0, 1], [2, 3]],
                         "numa": [[0, 1], [2, 3]], "pcie_switches": [[0, 1], [2, 3]]},
                "nics": [{"name": "mlx5", "rdma": True, "bandwidth_gbps": 25, "count": 2}],
            },
            "cpu": {"cpus": 64, "memory_gb": 256},
        },
        "node_groups": [{"type": "box", "count": 4, "prefix": "n", "nodes_per_leaf": 2, "leaf_prefix": "leaf"}],
    }
