"""What an algorithm supplies to the generic roles, and what they hand it (docs/architecture.md,
"How an algorithm plugs in").

- ``BehaviourPolicy``: picks the actions on an env runner (Acme's ``ActorCore``: an initial
  state, ``act(model, obs, state, ctx)``, declared extras). Built per env runner from the
  algorithm's own config section and an ``EnvRunnerContext``.
- ``AlgorithmLearner``: the update rule. Built from the algorithm's section and a
  ``LearnerContext``; it pulls its data from the source its data path builds
  (``RolloutBatch`` for ``on_policy``, ``ReplaySource`` for ``replay``).

No Ray here, and no run ``Config``: an algorithm sees its own section and a small context.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

    from kilorl.core import GradientComm, Rollout

State = dict[str, np.ndarray]
"""A behaviour policy's per-env state: ``[N, ...]`` arrays (an LSTM's ``h`` and ``c``); empty
for a memoryless policy."""


@dataclass(frozen=True)
class Extra:
    """One per-step entry a behaviour policy records beside obs, actions and rewards."""

    shape: tuple[int, ...] = ()
    """Shape of one env's entry (``()`` for a scalar such as V(s))."""
    dtype: str = "float32"
    """numpy dtype name."""


@dataclass(frozen=True)
class EnvRunnerContext:
    """What a behaviour policy is built with: who it acts for and on what."""

    index: int
    """This env runner's index, 0 .. num_env_runners - 1 (Ape-X's per-actor epsilon)."""
    num_env_runners: int
    num_envs: int
    """Environments this env runner steps."""
    obs_space: gym.Space
    action_space: gym.Space
    seed: int
    """This env runner's seed (from the run's seed, its index and the iteration it started at:
    a resumed run's environments do not replay the episodes they played before)."""
    total_env_steps: int
    """The run's env-step budget (what schedules run over)."""
    run_seed: int = 0
    """``train.seed``: the same across a resume, for draws keyed by the run's step clock."""
    model_state: Callable[[int], State] | None = None
    """The model's own state for ``n`` fresh episodes (a recurrent model's zeros), None for a
    memoryless model: what a behaviour policy acting with the model starts and resets to."""


@dataclass(frozen=True)
class StepContext:
    """Where the run stands at one step, as the env runner knows it."""

    env_steps: int
    """Env steps of the whole run so far (the driver's count at rollout start, plus this
    env runner's steps since, scaled by the number of env runners)."""
    version: int
    """Parameter version of the policy acting."""
    env_runner: int
    """Index of the env runner."""


class BehaviourPolicy(abc.ABC):
    """Chooses actions on an env runner and says what to keep per step.

    ``extras`` declares the per-step entries ``act`` returns (checked at start-up and at
    every step: a policy whose extras break their declaration fails naming the entry).
    ``observe`` gives extras of observations that were not acted on: each finished
    episode's real final observation and s_T (e.g. V for the truncation bootstrap).
    """

    extras: Mapping[str, Extra] = {}

    def __init__(self, algo_cfg: Any, ctx: EnvRunnerContext) -> None:
        self.algo_cfg, self.ctx = algo_cfg, ctx

    def initial_state(self, n_envs: int) -> State:
        """The policy's state for ``n_envs`` fresh episodes (empty: no state)."""
        return {}

    @abc.abstractmethod
    def act(self, model: torch.nn.Module, obs: torch.Tensor, state: State,
            ctx: StepContext) -> tuple[torch.Tensor, dict[str, np.ndarray], State]:
        """Actions for a ``[N, ...]`` observation batch, this step's ``[N, ...]`` extras and
        the next state."""

    def observe(self, model: torch.nn.Module, obs: torch.Tensor, state: State | None = None) -> dict[str, np.ndarray]:
        """Extras of ``[K, ...]`` observations nobody acts on (final observations, s_T); a stateful
        policy gets the ``[K, ...]`` state they were seen with (before a reset), others none."""
        return {}

    def reset(self, state: State, done: np.ndarray) -> State:
        """The state with the rows of envs whose episode just ended (``done``) started over."""
        if not state or not done.any():
            return state
        fresh = self.initial_state(int(done.sum()))
        for key, value in state.items():
            value[done] = fresh[key]
        return state


@dataclass(frozen=True)
class OfflineRows:
    """Recorded transitions a replay algorithm mixes into every batch (``replay_buffer.offline``)."""

    columns: dict[str, np.ndarray]
    """``obs``, ``action`` (in the env's units), ``reward``, ``next_obs``, ``terminated``,
    ``return_to_go`` (discounted within the episode, ``kilorl.datasets.returns``): one row per
    recorded step."""
    ratio: float
    """Share of every sampled batch drawn from these rows: exactly ``round(ratio * B)``."""
    source: str = ""
    """Where the rows came from (the dataset's path), for messages."""


@dataclass(frozen=True)
class LearnerContext:
    """What an algorithm's learner is built with, instead of the whole run config."""

    obs_space: gym.Space
    action_space: gym.Space
    grad_comm: GradientComm
    build_model: Callable[[], torch.nn.Module]
    """The spec's model builder applied to the spaces and the run's ``model`` section: the
    same network an env runner and ``kilorl eval`` build."""
    device: str = "cpu"
    """``train.device`` (``auto`` / ``cpu`` / ``cuda``)."""
    rank: int = 0
    world_size: int = 1
    """Learners training together (gradients averaged over them)."""
    envs_per_env_runner: int = 1
    num_env_runners: int = 1
    total_env_steps: int = 1
    seed: int = 1
    mixed_precision: str = "no"
    gradient_accumulation_steps: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else a data path hands its algorithm (kept small)."""
    replay_storage: ReplayStorageFactory | None = None
    """Where a replay algorithm keeps its table's rows (the run's ``replay_buffer`` section:
    the store workers); None: in this process (``kilorl.algos.common.RingTable``)."""
    offline: OfflineRows | None = None
    """Recorded data to mix into every batch at a fixed share (``replay_buffer.offline``)."""
    offline_storage: OfflineStorageFactory | None = None
    """Where the recorded rows live: an immutable table on the store workers (a ``replay_buffer``
    section with ``backend: store``, ``kilorl.roles.store_offline``); None: in this process."""


class RolloutBatch:
    """The ``on_policy`` source: this iteration's fresh rollouts, merged along the env axis."""

    def __init__(self, rollout: Rollout) -> None:
        self._rollout = rollout

    def rollout(self) -> Rollout:
        return self._rollout


SAMPLE_WEIGHT = "weight"
"""The column a prioritized ``ReplayStorage`` adds to a sample: each row's importance weight
(not a stored column). Such a storage also has ``update_priorities(errors)`` for the rows of
its last sample, and ``progress`` (share of the run done: the weights' exponent follows it)."""


class ReplayStorage(Protocol):
    """Rows of a fixed schema, FIFO at capacity, sampled uniformly: what ``RingTable`` does in
    the learner's process and the store's replay tables do in the store workers (which may
    also sample by priority, ``SAMPLE_WEIGHT``, and rate-limit, ``sample_budget()``)."""

    def insert(self, rows: Mapping[str, np.ndarray]) -> None: ...

    def sample(self, batch_size: int) -> dict[str, np.ndarray]: ...

    def __len__(self) -> int: ...


ReplayStorageFactory = Callable[[str, Mapping[str, tuple[tuple[int, ...], Any]], int, int], ReplayStorage]
"""``factory(table name, schema {column: (row shape, dtype)}, capacity, seed) -> ReplayStorage``."""

OfflineStorageFactory = Callable[[str, Mapping[str, np.ndarray], int], Any]
"""``factory(table name, rows {column: [n, ...]}, seed)``: a table holding exactly ``rows``, loaded
at most once, with ``sample(batch_size)`` and ``len``, which nothing else inserts into."""


class ReplaySource(abc.ABC):
    """The ``replay`` source: a table the learner samples from (in the learner process today;
    in the store workers behind the same calls with the replay service)."""

    @abc.abstractmethod
    def add(self, rollout: Rollout) -> None:
        """Insert a rollout's transitions (the algorithm's adder: n-step returns and the like)."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Rows that can be sampled."""

    @abc.abstractmethod
    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` rows, uniformly (columns of ``[B, ...]``)."""

    inserted_env_steps: int = 0
    """Env steps inserted into the table so far (the learner's rate: gradient steps per insert)."""

    def stats(self) -> dict[str, float]:
        """The table's own metrics for the iteration's row (size, bytes, blocked time); none by default."""
        return {}


class AlgorithmLearner(abc.ABC):
    """An algorithm's update rule: owns its networks and optimizers, turns data into steps."""

    @abc.abstractmethod
    def __init__(self, algo_cfg: Any, ctx: LearnerContext) -> None: ...

    @abc.abstractmethod
    def update(self, source: Any, env_steps_total: int) -> dict[str, float]:
        """One iteration's training on ``source`` (``RolloutBatch`` or ``ReplaySource``);
        returns scalar statistics."""

    def make_replay_table(self) -> ReplaySource:
        """The table the ``replay`` data path adds rollouts to (Acme's ``make_replay_tables``),
        made once; the algorithm keeps it and checkpoints it with its state."""
        raise NotImplementedError(f"{type(self).__name__} has no replay table")

    def warm_up(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Slow one-off preparation that may run while the first rollout is collected."""

    @abc.abstractmethod
    def weights(self) -> dict[str, np.ndarray]:
        """What env runners need, under the names the algorithm's layout uses."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """Checkpointable state: ``model`` (the network the spec's model builder makes),
        ``modules`` / ``optimizers`` of every other named part, ``obs_rms`` / ``ret_rms``,
        counters and RNG (``kilorl.roles.checkpoint_format``)."""

    @abc.abstractmethod
    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state`` returned."""

    def policy_state(self) -> dict[str, Any]:
        """What playing the policy needs (``model``, ``obs_rms``): evaluation during training
        takes this, not the whole ``state()`` (a replay table has no part in it)."""
        state = self.state()
        return {"model": state["model"], "obs_rms": state["obs_rms"]}

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Take published ``weights()`` (a durable version a resumed run continues from)."""
        raise NotImplementedError(f"{type(self).__name__} cannot resume from published weights")
