"""Failures the training loop turns into decisions (kept free of Ray so the driver imports it cheaply)."""

from __future__ import annotations

LEARNER_MAX_RESTORES = 2
"""Times a run restores its last checkpoint after losing a learner process before it fails."""


class LearnerLost(RuntimeError):
    """A learner process died; the message names its rank and the cause."""
