"""What every algorithm's configuration has: its name, its collection length, its discount,
and what one iteration of the run is for it."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from kilorl.config_section import Section


class AlgoConfig(Section):
    """Base of an algorithm's section; subclasses add ``name: Literal[...]`` and their fields."""

    data_path: ClassVar[str] = "on_policy"
    """The data path whose options this section carries (the spec's, checked at registration)."""

    name: str
    """Algorithm name; selects the algorithm and which of its fields are allowed."""
    rollout_length: int = Field(default=128, gt=0)
    """Environment steps each env takes per collection (one rollout of ``[T, N]``)."""

    @property
    def discount(self) -> float | None:
        """The algorithm's discount factor, if it has one (the return normaliser uses it)."""
        return getattr(self, "gamma", None)

    def iteration_env_steps(self, parallelism: Any) -> int:
        """Env steps one iteration consumes: a rollout from every env runner (on-policy)."""
        return parallelism.actor * parallelism.envs_per_actor * self.rollout_length

    def check_batch(self, batch_size: int, gradient_accumulation_steps: int) -> None:
        """Raise ValueError when this algorithm cannot split a batch of ``batch_size`` samples."""

    def check_parallelism(self, parallelism: Any) -> None:
        """Raise ValueError, naming both fields, for role counts this algorithm cannot use."""

    def check_recurrent(self, parallelism: Any, gradient_accumulation_steps: int) -> None:
        """Raise ValueError, naming the fields, when this algorithm cannot train a recurrent
        model (``model.recurrent``) on this batch; the minibatch unit is then an env column."""
        raise ValueError(f"model.recurrent: algo.name={self.name} does not train recurrent models (ppo and a2c do)")


class OnPolicyConfig(AlgoConfig):
    """Fields shared by on-policy actor-critic methods that learn from ``[T, N]`` rollouts."""

    rollout_length: int = Field(default=128, gt=0)
    """Environment steps each env takes per rollout (batch = actors x envs x this)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE lambda (bias/variance trade-off of the advantage estimate)."""
    lr: float = Field(default=3e-4, gt=0)
    """Learning rate at the start of training."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate to 0 over total_env_steps."""
    norm_adv: bool = True
    """Normalize advantages per (mini)batch."""
    ent_coef: float = Field(default=0.0, ge=0)
    """Entropy bonus coefficient."""
    vf_coef: float = Field(default=0.5, ge=0)
    """Value loss coefficient."""
    max_grad_norm: float = Field(default=0.5, gt=0)
    """Global gradient-norm clipping threshold."""


class ReplayConfig(AlgoConfig):
    """Fields shared by algorithms on the ``replay`` data path: env runners add rollouts to a
    table as they complete, learners sample from it at a fixed ratio."""

    data_path: ClassVar[str] = "replay"
    replay_options: ClassVar[tuple[str, ...]] = ()
    """The ``replay_buffer`` options whose rows the algorithm's learner can use:
    ``prioritized`` (it weights its loss and updates priorities), ``samples_per_insert`` (it
    takes the gradient steps the rate limiter allows). Others are refused by name."""

    rollout_length: int = Field(default=32, gt=0)
    """Environment steps each env takes per rollout added to the table."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    buffer_size: int = Field(default=100_000, gt=0)
    """Rows the replay table keeps (oldest evicted first)."""
    batch_size: int = Field(default=64, gt=0)
    """Rows sampled per gradient step."""
    learning_starts: int = Field(default=1000, ge=0)
    """Env steps collected before the first gradient step."""

    def iteration_env_steps(self, parallelism: Any) -> int:
        """One rollout per learner (each learner adds its own to its table)."""
        return parallelism.learner * parallelism.envs_per_actor * self.rollout_length


class QueueOptions(Section):
    """The as-completed ``queue`` data path: batches are the first rollouts to complete."""

    rollouts_per_batch: int = Field(default=2, ge=1)
    """Rollouts in one learner batch, dealt in equal shares to the learner ranks."""
    max_queued_rollouts: int = Field(default=8, ge=1)
    """Completed rollouts waiting for a learner before env runners pause (the back-pressure)."""
    max_policy_lag: int = Field(default=20, ge=0)
    """Rollouts produced more than this many versions before the one being trained are dropped
    (a rollout is as old as its first step)."""
    refresh_every_steps: int | None = Field(default=None, ge=1)
    """An env runner looks for a newer published version every this many steps of a rollout
    and acts on with it at once (never waiting; each step's version is kept, so the lag is
    per step); None: one version per rollout, taken at its start."""


class QueueConfig(AlgoConfig):
    """Fields shared by algorithms on the ``queue`` data path (IMPALA): env runners never wait
    for a version; learners train on the rollouts that complete first, lag and all."""

    data_path: ClassVar[str] = "queue"

    rollout_length: int = Field(default=32, gt=0)
    """Environment steps each env takes per rollout."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    queue: QueueOptions = Field(default_factory=QueueOptions)
    """How rollouts queue up for the learners."""

    def iteration_env_steps(self, parallelism: Any) -> int:
        """One batch: ``queue.rollouts_per_batch`` rollouts."""
        return self.queue.rollouts_per_batch * parallelism.envs_per_actor * self.rollout_length

    def check_parallelism(self, parallelism: Any) -> None:
        q = self.queue
        if q.rollouts_per_batch % parallelism.learner:
            raise ValueError(f"algo.queue.rollouts_per_batch={q.rollouts_per_batch} must be a multiple of "
                             f"parallelism.learner={parallelism.learner} (equal shares per learner)")
        if q.max_queued_rollouts < q.rollouts_per_batch:
            raise ValueError(f"algo.queue.max_queued_rollouts={q.max_queued_rollouts} is smaller than one batch "
                             f"(algo.queue.rollouts_per_batch={q.rollouts_per_batch})")
