"""Moving a learner (kilorl.trainer.migration): a restart from the run's checkpoint, elsewhere or in place.

To another node the replacement starts while the old learner lives, so a failed start leaves
the old one serving. In place (no other node has room) and with several learners (the process
group must re-form) the old processes end first: their bundles are where the new ones start.
A restart that then fails leaves no learner: ``LearnerGroupLost``, and the run stops on the
checkpoint written just before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kilorl.monitor.migration import MigrationDecision
    from kilorl.monitor.settings import MonitorConfig
    from kilorl.trainer.data_path import DataPath
    from kilorl.trainer.session import RoleSession


class Migrator(Protocol):
    """What a learner move needs of ``kilorl.trainer.migration.Migrator`` (named here, so the two
    modules do not import each other)."""

    config: MonitorConfig
    roles: RoleSession
    save: Callable[[], Path]

    def bundle(self, role: str, instance: int) -> dict[str, Any]: ...

    def forget_role(self, role: str, rank: int) -> None: ...

    def wait_for(self, refs: list[Any], timeout: float) -> list[Any]:
        """``ray.get(refs, timeout=timeout)``, with actor-only migration rounds while it waits."""


class LearnerGroupLost(RuntimeError):
    """The restarted learner group did not come up; the old one was already ended."""

    def __init__(self, checkpoint: Path, cause: BaseException) -> None:
        super().__init__(f"the restarted learner group failed ({type(cause).__name__}: {cause}); "
                         f"the old group had ended")
        self.checkpoint = checkpoint


def move_learner(m: Migrator, d: MigrationDecision, loop: DataPath, node_id: str | None,
                 options: dict[str, Any], ended: Callable[[], None] = lambda: None, end_first: bool = False) -> str:
    """Restarts learner ``d.rank`` from a fresh checkpoint on ``node_id`` (None: in place, in its
    own bundle), the whole group when there are several; returns the record's detail.
    ``ended`` is called once the old process has ended; ``end_first``: it ends right after the
    checkpoint even on a move to another node (its limit is nearer than the replacement's start)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from kilorl.trainer.checkpoint import load_checkpoint

    timeout = m.config.migration.ready_timeout_s
    olds = list(m.roles.learners)
    t0 = time.monotonic()
    digest = olds[d.rank].weights_digest.remote()  # in flight while the checkpoint is taken
    path = m.save()
    before = ray.get(digest, timeout=timeout)
    took = time.monotonic() - t0
    in_place, gang = node_id is None, len(olds) > 1
    ends_first = gang or in_place or end_first
    if ends_first:  # the old processes' bundles are where the new ones start: free them first, and at
        for h in olds:  # once: reading the checkpoint back imports torch here, seconds a fast leak does not have
            ray.kill(h)
        ended()
    state, _ = load_checkpoint(path)
    moved = (m.bundle("learner", d.rank) if node_id is None
             else {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)})
    new = [m.roles.spawn_learner(r, state, moved if r == d.rank else m.bundle("learner", r), replacement=True)
           for r in range(len(olds))]
    try:
        # the new process starts in seconds to a minute: actors go on being watched (and replaced) meanwhile
        master = m.wait_for([new[0].rendezvous.remote()], timeout)[0] if gang else None
        m.wait_for([h.start.remote(master) for h in new], timeout)
        m.wait_for([h.publish.remote(loop.iteration) for h in new], timeout)  # republish the current version
        after = m.wait_for([h.weights_digest.remote() for h in new], timeout)
        if any(a != before for a in after):
            raise RuntimeError(f"the restarted learners' weights (digests {after}) differ from the old ({before})")
    except BaseException as err:
        for h in new:
            ray.kill(h)
        if ends_first:  # the old learners are gone: the run stops on the checkpoint just written
            raise LearnerGroupLost(path, err) from err
        raise
    m.roles.learners[:] = new
    for r in range(len(olds)):
        m.forget_role("learner", r)
    if not ends_first:
        ray.kill(olds[0])
        ended()
    group = f"; all {len(olds)} learners restarted (the process group re-formed)" if gang else ""
    where = ("; the old process ended first, the new one started in its bundle" if in_place
             else "; the old process ended first" if end_first else "")
    return (f"resumed from {path.name} at version {loop.iteration} (weights digest {before:.6g}, checkpoint "
            f"taken in {took:.1f} s){group}{where}")
