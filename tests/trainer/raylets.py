"""A Ray cluster of named raylets for the multi-node checks (run in fresh processes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import ray
from ray.cluster_utils import Cluster as RayCluster

from kilorl.placement.ray_placement import NODE_RESOURCE_AMOUNT, node_resource
from kilorl.trainer.ray_start import start_local_cluster


@contextmanager
def named_raylets(names: tuple[str, ...] = ("a", "b"), cpus: int = 3) -> Iterator[RayCluster]:
    """A 0-CPU head and one raylet per name (2 GiB, declaring ``kilorl_node_<name>``), with
    this process connected; Ray and the cluster are shut down on exit."""
    cluster = start_local_cluster({"num_cpus": 0, "object_store_memory": 80 << 20},
                                  [{"num_cpus": cpus, "memory": 2 << 30, "object_store_memory": 80 << 20,
                                    "resources": {node_resource(name): NODE_RESOURCE_AMOUNT}} for name in names])
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
