"""The small interfaces every part is built against (Acme-style).

An Actor produces experience with a policy copy; a Learner turns experience into new
parameters; a VariableSource hands out the newest parameters; a ParameterStore is the
versioned variable source shared by all roles (docs/architecture.md, "Contracts").
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import numpy as np

Tensors = Mapping[str, Any]
"""A flat name -> array/tensor mapping (a model's state_dict, a rollout batch)."""


class VariableSource(abc.ABC):
    """Anything that can hand out the current parameters."""

    @abc.abstractmethod
    def get_variables(self, names: list[str] | None = None) -> Tensors:
        """Return the current parameters (all, or only ``names``)."""


class ParameterStore(abc.ABC):
    """Versioned parameters: monotonic versions, consistent reads, blocking waits.

    A fetch returns one complete version, never a mix of two. ``layout`` lets a reader
    ask for only the tensors (and, in stores that support it, the slices) it needs.
    """

    @abc.abstractmethod
    def publish(self, name: str, version: int, tensors: Tensors) -> None:
        """Store ``tensors`` as ``version`` of ``name``; versions must increase."""

    @abc.abstractmethod
    def latest_version(self, name: str) -> int | None:
        """Newest published version of ``name``, or None if nothing is published."""

    @abc.abstractmethod
    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None) -> tuple[int, Tensors]:
        """Return ``(version, tensors)``; the newest version when ``version`` is None."""

    @abc.abstractmethod
    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        """Block until a version >= ``min_version`` exists; return it. Raises TimeoutError."""


class Actor(abc.ABC):
    """Steps environments with a local policy copy and returns trajectories."""

    @abc.abstractmethod
    def collect(self, min_version: int) -> dict[str, np.ndarray]:
        """Run one rollout with parameters at least ``min_version`` new."""


class Learner(abc.ABC):
    """Consumes batches of experience and produces new parameters."""

    @abc.abstractmethod
    def step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One update on ``batch``; returns scalar training statistics."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Everything needed to resume (weights, optimizer, counters)."""
