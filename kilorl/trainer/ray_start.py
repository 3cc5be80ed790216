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
