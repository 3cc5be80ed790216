"""The contracts every part is built against (docs/architecture.md, "Contracts").

Three levels, each implemented once per kind and called by exactly one other part:

- ``ParameterStore``: versioned parameters shared by all roles (roles call it).
- ``Actor`` / ``Learner``: the role processes the trainer calls (``ready``/``collect``,
  ``publish``/``update``/``state``).
- ``StepRecorder`` / ``AlgorithmLearner`` / ``GradientSync``: what an algorithm supplies
  to the generic actor and learner roles, and how its learner reaches gradient
  communication. Algorithms implement them without knowing of Ray.

Rollouts keep the ``[T, N, ...]`` layout (time, env) from the actor to the algorithm.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

    from kilorl.config import Config
    from kilorl.envs.normalization import Moments

Tensors = Mapping[str, Any]
"""A flat name -> array/tensor mapping (published weights, a model's state_dict)."""


@dataclass
class Rollout:
    """One or more actors' experience for one policy version.

    ``steps`` arrays are ``[T, N, ...]`` (time, env); ``last`` arrays are ``[N, ...]`` and
    describe the state after step ``T`` (e.g. its value, for bootstrapping). ``moments``
    are raw observation / discounted-return statistics for the learner's normalizers.
    """

    steps: dict[str, np.ndarray]
    last: dict[str, np.ndarray] = field(default_factory=dict)
    moments: dict[str, list[Moments]] = field(default_factory=dict)
    version: int | None = None
    """Parameter version of the policy that acted (None: unknown); the learner uses it to
    refuse batches older than ``sync.max_staleness``."""

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, N)``: rollout length and number of environments."""
        return self.steps["rewards"].shape[:2]  # type: ignore[return-value]


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
    wait_s: float
    """Seconds spent waiting for the parameters the rollout needed."""


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
    def collect(self, min_version: int) -> tuple[Rollout, RolloutInfo]:
        """One rollout with parameters at least ``min_version`` new."""


class Learner(abc.ABC):
    """A role that turns rollouts into new parameter versions."""

    @abc.abstractmethod
    def publish(self, version: int) -> None:
        """Publish the current parameters as ``version`` (rank 0 only; others no-op)."""

    @abc.abstractmethod
    def update(self, version: int, env_steps_total: int, *rollouts: Rollout) -> dict[str, float]:
        """Train on ``rollouts`` (merged along the env axis), then publish ``version``."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Everything needed to resume (weights, optimizer, normalizers, counters, RNG)."""

    @abc.abstractmethod
    def checkpoint_files(self) -> CheckpointFiles:
        """``state()`` as checkpoint file contents, which the trainer writes."""

    @abc.abstractmethod
    def evaluate(self, episodes: int, seed: int, deterministic: bool = True) -> list[float]:
        """Returns of ``episodes`` whole episodes (seeds ``seed + k``) with the current policy."""


# ---- algorithms: what the generic roles call ---------------------------------------------
class StepRecorder(abc.ABC):
    """What an algorithm keeps per env step, on the actor (its fields beyond obs/actions/rewards/dones)."""

    fields: tuple[str, ...] = ()
    """Names of the per-step ``[T, N]`` arrays ``act`` returns (one place per algorithm)."""

    @abc.abstractmethod
    def act(self, model: torch.nn.Module, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
        """Actions for a ``[N, ...]`` observation batch, and this step's ``[N]`` records."""

    @abc.abstractmethod
    def value(self, model: torch.nn.Module, obs: torch.Tensor) -> np.ndarray | None:
        """V(obs) to bootstrap truncated episodes and the rollout's end; None: no critic."""


class GradientSync(abc.ABC):
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


class AlgorithmLearner(abc.ABC):
    """An algorithm's update rule: owns model and optimizer, turns a rollout into a step."""

    @abc.abstractmethod
    def __init__(self, cfg: Config, obs_space: gym.Space, action_space: gym.Space, grad_sync: GradientSync) -> None: ...

    @abc.abstractmethod
    def update(self, rollout: Rollout, env_steps_total: int) -> dict[str, float]:
        """One update on ``rollout`` (``[T, N]``); returns scalar statistics."""

    def warm_up(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Slow one-off preparation that may run while the first rollout is collected."""

    @abc.abstractmethod
    def weights(self) -> dict[str, np.ndarray]:
        """What actors need, under the names the algorithm's layout uses."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Checkpointable state (see ``kilorl.trainer.checkpoint``)."""

    @abc.abstractmethod
    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state`` returned."""

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Take published ``weights()`` (a durable version a resumed run continues from)."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume from published weights")
