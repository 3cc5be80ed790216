"""Starting an embedded Ray on a loaded machine.

``ray.init()`` for a new local instance waits a fixed 30 s for its raylet to register with
the GCS (``raylet_start_wait_time_s`` in Ray's ``_private/node.py``, not configurable) and
then raises "The current node timed out during startup". On a 2-core machine at load
average 30-40 (seven jobs beside it) that happened to 3 of 3 test start-ups in one run
here; on the same machine at load 2 it does not happen. A second start, after the first
one's processes are shut down, finds the GCS answering. So an embedded start is tried up to
``attempts`` times; connecting to an existing cluster is not retried (nothing is started).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

START_TIMEOUT_MESSAGE = "timed out during startup"
"""What Ray's fixed start-up window raises (``Exception``, not a Ray error type)."""


def init_embedded_ray(attempts: int = 3, **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` for a new local instance, started again where Ray's own fixed
    start-up window ran out; any other failure is raised at once."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as err:
            if START_TIMEOUT_MESSAGE not in str(err) or attempt == attempts:
                raise
            print(f"ray: the local instance timed out during its start-up (attempt {attempt} of {attempts}); "
                  "starting it again", flush=True)
            ray.shutdown()


def start_local_cluster(head_node_args: dict[str, Any], nodes: Sequence[dict[str, Any]] = (),
                        attempts: int = 3) -> Any:
    """A ``ray.cluster_utils.Cluster`` of a head and ``nodes`` (their ``add_node`` arguments),
    every raylet registered, started again where one met Ray's fixed start-up window. What a
    failed attempt started (its GCS and raylets, processes this one spawned) is ended before
    the next, so a start that fails leaves no processes. Used by the multi-raylet checks and
    benchmarks; any other failure is raised at once."""
    import psutil
    from ray.cluster_utils import Cluster

    me = psutil.Process()
    for attempt in range(1, attempts + 1):
        before = {p.pid for p in me.children(recursive=True)}
        cluster = Cluster(initialize_head=False)
        try:
            cluster.add_node(**head_node_args)
            for args in nodes:
                cluster.add_node(**args)
            cluster.wait_for_nodes()
            return cluster
        except Exception as err:
            if START_TIMEOUT_MESSAGE not in str(err) or attempt == attempts:
                _end_cluster(cluster, me, before)
                raise
            print(f"ray: a raylet of the local cluster timed out during its start-up (attempt {attempt} of "
                  f"{attempts}); starting the cluster again", flush=True)
            _end_cluster(cluster, me, before)
    raise AssertionError("unreachable")


def _end_cluster(cluster: Any, me: Any, before: set[int]) -> None:
    """Shut ``cluster`` down and end whatever this process spawned since ``before`` (a node
    whose start raised is not in the cluster's list, so its processes would outlive it)."""
    import psutil

    try:
        cluster.shutdown()
    except Exception:  # a half-started cluster may fail its own shutdown; the kill below ends it
        pass
    spawned = [p for p in me.children(recursive=True) if p.pid not in before]
    for p in spawned:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(spawned, timeout=10)
