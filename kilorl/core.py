"""The contracts every part is built against (docs/architecture.md, "Contracts").

Three levels, each implemented once per kind and called by exactly one other part:

- ``ParameterStore``: versioned parameters shared by all roles (roles call it).
- ``Actor`` / ``Learner``: the role processes the trainer calls (``ready``/``collect``,
  ``publish``/``update``/``state``).
- ``GradientComm``: how an algorithm's learner reaches gradient communication.

What an algorithm supplies to the generic roles (its behaviour policy, its learner) is in
``kilorl.algos.api``; algorithms implement it without knowing of Ray.

Rollouts keep the ``[T, N, ...]`` layout (time, env) from the actor to the algorithm.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

if TYPE_CHECKING:
    import torch

    from kilorl.envs.normalization import Moments

Tensors = Mapping[str, Any]
"""A flat name -> array/tensor mapping (published weights, a model's state_dict)."""


@dataclass
class Rollout:
    """One actor's (or several actors', merged) step record for one policy version.

    ``steps`` arrays are ``[T, N, ...]`` (time, env): ``obs`` (in the env's dtype, or the
    normalised float32 the policy saw where ``env.normalize_obs`` opts into that stage),
    ``actions``, ``rewards``, ``terminated`` and ``truncated`` kept apart, and the behaviour
    policy's declared extras. ``final`` holds the real final observation of every episode
    that ended inside the rollout: ``t`` and ``env`` (``[K]`` int64, where it ended),
    ``obs`` (``[K, ...]``) and the policy's extras of that observation (e.g. its value).
    ``last`` holds ``[N, ...]`` entries about s_T, the observation after step ``T``:
    ``obs`` and the policy's extras of it. ``state`` is the policy's state at rollout start
    (``[N, ...]`` arrays; empty for a memoryless policy). ``moments`` are raw observation /
    discounted-return statistics for the learner's normalisers.
    """

    steps: dict[str, np.ndarray]
    last: dict[str, np.ndarray] = field(default_factory=dict)
    moments: dict[str, list[Moments]] = field(default_factory=dict)
    version: int | None = None
    """Parameter version of the policy that acted (None: unknown); the on-policy data path
    refuses batches older than ``sync.max_staleness``."""
    final: dict[str, np.ndarray] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)
    env_steps_before: int = 0
    """Env steps of the whole run (all actors) when the rollout was started: the clock of
    schedules such as epsilon (as the driver knew it)."""
    column_versions: np.ndarray | None = None
    """``[N]`` int64: the parameter version that produced each env column, kept through
    merging (``version`` is their minimum); None where unknown."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, N)``: rollout length and number of environments."""
        return self.steps["rewards"].shape[:2]  # type: ignore[return-value]

    @property
    def env_steps(self) -> int:
        T, N = self.shape
        return T * N


@dataclass
class CheckpointFiles:
    """One checkpoint as its files' contents, made by the learner where torch is: bytes and
    JSON only, so the driver receives and writes it without importing torch."""

    files: dict[str, bytes]
    """File name -> contents (``kilorl.roles.checkpoint_format``)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """JSON-able entries for the checkpoint's ``meta.json`` (``updates``, optimizer structure)."""


class RolloutInfo(TypedDict):
    """What the driver learns about one rollout (the arrays go straight to the learner)."""

    actor: int
    version: int
    """Policy version that produced the rollout."""
    env_steps: int
    episode_returns: list[float]
    episode_lengths: list[int]
    collect_s: float
    """Seconds from the parameters in hand to the rollout built."""
    wait_s: float
    """Seconds spent waiting for the parameters the rollout needed."""
    agent_returns: NotRequired[dict[str, list[float]]]
    """Multi-agent environments only: each agent's own return in the episodes that ended
    (``episode_returns`` holds their sums)."""
    env_step_s: NotRequired[float]
    """Of ``collect_s``: seconds in the environments' steps (waiting for them, in subprocesses)."""
    inference_s: NotRequired[float]
    """Of ``collect_s``: seconds in the behaviour policy."""
    handoff_s: NotRequired[float]
    """Seconds handing the finished rollout over (writing it to the store worker), after ``collect_s``."""
    step_versions: NotRequired[list[int]]
    """With ``algo.queue.refresh_every_steps``: the version each step acted with (``version`` is
    the first; later steps may act with newer ones)."""


def step_lags(info: RolloutInfo, trained_at: int) -> list[int]:
    """Versions between each step's policy and ``trained_at``, the version the batch trains:
    one per step where the runner took newer versions mid-rollout, else one for the rollout."""
    return [trained_at - v for v in info.get("step_versions", [info["version"]])]


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
    def fetch(self, name: str, version: int | None = None, layout: list[str] | None = None,
              share: bool = False) -> tuple[int, Tensors]:
        """Return ``(version, tensors)``; the newest version when ``version`` is None.

        ``share``: the tensors may share the store's memory instead of being copies (no copy
        on the node); the caller only reads them, and holding them keeps the version's bytes."""

    @abc.abstractmethod
    def wait(self, name: str, min_version: int, timeout: float | None = None) -> int:
        """Block until a version >= ``min_version`` exists; return it. Raises TimeoutError."""

    def fetch_into(self, name: str, out: Mapping[str, torch.Tensor], version: int | None = None,
                   layout: list[str] | None = None) -> int:
        """Copy a version (the newest when None) into the tensors of ``out`` and return it.

        ``layout``: the names to read (all of ``out`` when None), each into ``out[name]``,
        which must have the version's shape and dtype (``ValueError`` otherwise). A reader that keeps its model copies
        each version into the model's own tensors, with no new tensors and no
        ``load_state_dict``. Stores override this with a copy straight from their buffers.
        A call that raises after the checks may leave ``out`` holding part of a version:
        a reader uses ``out`` again only after a call that returned."""
        import torch

        got, tensors = self.fetch(name, version, list(out) if layout is None else list(layout))
        values = {key: torch.as_tensor(np.asarray(value)) for key, value in tensors.items()}
        for key, value in values.items():  # all checked before any is copied
            dest = out[key]
            if dest.shape != value.shape or dest.dtype != value.dtype:
                raise ValueError(f"{key}: destination is {dest.dtype} {list(dest.shape)}, "
                                 f"version {got} has {value.dtype} {list(value.shape)}")
        for key, value in values.items():
            out[key].detach().copy_(value)
        return got


# ---- roles: what the trainer calls ------------------------------------------------------
class Actor(abc.ABC):
    """A role that steps environments with a local policy copy."""

    @abc.abstractmethod
    def ready(self) -> int:
        """Return once environments are built and reset (the start-up barrier)."""

    @abc.abstractmethod
    def collect(self, min_version: int, env_steps: int = 0) -> tuple[Rollout, RolloutInfo]:
        """One rollout with parameters at least ``min_version`` new; ``env_steps``: the run's
        env steps so far, the clock of the behaviour policy's schedules."""


class Learner(abc.ABC):
    """A role that turns rollouts into new parameter versions."""

    @abc.abstractmethod
    def publish(self, version: int) -> None:
        """Publish the current parameters as ``version`` (rank 0 only; others no-op)."""

    @abc.abstractmethod
    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        """Hand ``rollouts`` to the algorithm's data source, train, then publish ``version``."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Everything needed to resume (weights, optimizer, normalizers, counters, RNG)."""

    @abc.abstractmethod
    def checkpoint_files(self) -> CheckpointFiles:
        """``state()`` as checkpoint file contents, which the trainer writes."""

    @abc.abstractmethod
    def evaluate(self, episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        """Returns of ``episodes`` whole episodes (seeds ``seed + k``) with the current policy."""


# ---- learners: their one door to gradient communication -------------------------------
class GradientComm(abc.ABC):
    """The learner's one door to gradient communication (docs/architecture.md, "Contracts").

    An algorithm calls ``prepare`` once, runs micro-batches except the last inside
    ``no_sync()``, and calls ``synchronize`` after the last backward of an optimizer
    step. The implementation decides how: one all-reduce after backward today; DDP
    buckets overlapped with backward, or compressed gradients, later.
    """

    world_size: int = 1

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make ranks agree on ``model``; return the module to run forward/backward on."""
        return model

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate locally (no communication)."""
        yield

    @abc.abstractmethod
    def synchronize(self, params: list[torch.nn.Parameter]) -> None:
        """Leave the average of all ranks' gradients in every ``param.grad``."""

    @abc.abstractmethod
    def average_scalars(self, values: list[float]) -> list[float]:
        """Mean of ``values`` over ranks (e.g. the KL that stops PPO's epochs early)."""

    @abc.abstractmethod
    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over ranks, in place."""

    def stats(self) -> dict[str, float]:
        """Communication metrics since the last call (bytes, seconds); merged into the update's."""
        return {}
