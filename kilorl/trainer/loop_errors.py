"""Failures the training loop turns into decisions (kept free of Ray so the driver imports it cheaply)."""

from __future__ import annotations

LEARNER_MAX_RESTORES = 2
"""Times a run restores its last checkpoint after losing a learner process before it fails."""


class LearnerLost(RuntimeError):
    """A learner process died; the message names its rank and the cause."""


def note_restart_timeout(err: BaseException, timeout_s: float) -> None:
    """Adds to ``err`` (a lost rollout that did not come back, re-raised) the deadline it ran past."""
    err.add_note(f"the lost rollout did not come back within train.restart_timeout_s ({timeout_s:g} s)")
