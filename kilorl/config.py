"""Run configuration: YAML validated by pydantic.

Every section forbids unknown keys, so a typo is an error that names the field and
lists what is allowed instead of being silently ignored. Every field documents its
default in its docstring (pydantic reads attribute docstrings into descriptions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from kilorl.algos.ppo.config import PPOConfig
from kilorl.algos.registry import get as algo_spec
from kilorl.algos.registry import names as algo_names
from kilorl.comm.config import CompressionConfig
from kilorl.config_messages import format_validation_error
from kilorl.config_multi_agent import MultiAgentConfig
from kilorl.config_policies import check_policies, policy_configs
from kilorl.config_replay import ReplayBufferConfig, check_actorless
from kilorl.config_scale import StoreSection, SyncSection
from kilorl.config_section import Section as _Section
from kilorl.monitor.settings import MonitorConfig


class ConfigError(ValueError):
    """An invalid configuration; the message names the offending field."""


def _algo_section() -> Any:
    """Every registered algorithm's config class, told apart by ``algo.name``."""
    members = tuple(algo_spec(n).load("config") for n in algo_names())
    return Annotated[Union[members], Field(discriminator="name")]  # noqa: UP007 - a runtime tuple of classes


AlgoSection = _algo_section()
"""The ``algo`` section: ``algo.name`` picks the algorithm's own config class (kilorl.algos.registry)."""


class EnvConfig(_Section):
    id: str
    """Gymnasium id (``CartPole-v1``) or entry point ``package.module:ClassName``; an entry point
    that returns a PettingZoo ``ParallelEnv`` (``mpe2.simple_spread_v3:parallel_env``) makes each
    agent a column of the rollout (``kilorl.envs.agent_columns``)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the environment constructor."""
    max_episode_steps: int | None = Field(default=None, gt=0)
    """Override the registered time limit (None keeps the environment's own)."""
    normalize_obs: bool = False
    """Running mean/std observation normalization (statistics are checkpointed)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return."""
    clip_obs: float = Field(default=10.0, gt=0)
    """Clip normalized observations to [-clip_obs, clip_obs]."""
    clip_reward: float = Field(default=10.0, gt=0)
    """Clip normalized rewards to [-clip_reward, clip_reward]."""
    max_num_agents: int | None = Field(default=None, gt=0)
    """PettingZoo environments only: agent columns per environment copy (agents appearing
    mid-episode take a free one); None: the environment's own ``max_num_agents``."""


class RecurrentSection(_Section):
    """A memory core between the MLP torso and the heads (``model.recurrent``)."""

    type: Literal["lstm", "gru"] = "lstm"
    """The recurrent cell: ``lstm`` (state ``h`` and ``c``) or ``gru`` (state ``h``)."""
    hidden_size: int = Field(default=128, gt=0)
    """Width of the recurrent state."""
    num_layers: int = Field(default=1, ge=1)
    """Stacked recurrent layers."""


class ModelConfig(_Section):
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the policy and value MLPs."""
    activation: Literal["tanh", "relu", "gelu"] = "tanh"
    """Hidden activation."""
    shared_backbone: bool = False
    """Share the hidden layers between policy and value heads."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    ortho_init: bool = True
    """Orthogonal initialization (gain sqrt(2) hidden, 0.01 policy head, 1 value head)."""
    dueling: bool = False
    """Q networks only (``algo.name: dqn``): separate value and advantage streams in the head."""
    torso: Literal["mlp", "nature_cnn"] = "mlp"
    """Q networks only (``algo.name: dqn``): ``nature_cnn`` puts the Nature DQN convolutions over
    image observations (``[C, H, W]`` stacks, ``uint8`` scaled to [0, 1]) before ``hidden_sizes``."""
    recurrent: RecurrentSection | None = None
    """A recurrent core (LSTM or GRU) after the MLP torso, one per head unless ``shared_backbone``
    (None: a memoryless policy). The actors carry its state across steps and rollouts."""
    actor_inputs: int | None = Field(default=None, gt=0)
    """The policy head sees only the first ``actor_inputs`` observation entries, the value head
    all of them: MAPPO's centralised critic (``multi_agent.centralized_critic: state`` puts the
    environment's global state after each agent's own observation). None: both see everything."""

    @model_validator(mode="after")
    def _positive_widths(self) -> ModelConfig:
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError("hidden_sizes must be a non-empty list of positive integers")
        if self.actor_inputs is not None and (self.shared_backbone or self.recurrent is not None):
            raise ValueError("actor_inputs: the policy and value heads see different inputs, so they need separate "
                             "memoryless torsos (not shared_backbone, not recurrent)")
        return self


class ParallelismConfig(_Section):
    actor: int = Field(default=1, ge=0)
    """Number of actor processes (Ray actors) stepping environments. 0: none; a replay
    algorithm then trains from ``replay_buffer.offline`` alone (its ``ratio`` must be 1.0)."""
    envs_per_actor: int = Field(default=8, ge=1)
    """Vectorized environments inside each actor."""
    learner: int = Field(default=1, ge=1)
    """Number of learner processes (gradients all-reduced across them)."""
    parameter_server: int = Field(default=1, ge=1)
    """Number of parameter-server shards holding the versioned weights."""
    vector_env: Literal["in_process", "subprocesses"] = "in_process"
    """Gymnasium vector env inside an env runner: every env in its process (Gymnasium's
    ``SyncVectorEnv``) or one subprocess per env (``AsyncVectorEnv``). Not "sync"/"async":
    those words belong to the ``sync`` section (how env runners follow parameter versions)."""
    env_groups: int = Field(default=1, ge=1)
    """Groups the env runner's envs are cut into (``envs_per_actor`` must be a multiple): with
    ``vector_env: subprocesses`` one group's envs step while the policy acts on the next group's
    (double-buffered sampling); 1: all envs step together."""

    @field_validator("vector_env", mode="before")
    @classmethod
    def _legacy_vector_env(cls, value: Any) -> Any:
        """Run directories written before the rename say ``sync`` / ``async``: read them as such."""
        return {"sync": "in_process", "async": "subprocesses"}.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _groups_divide_envs(self) -> ParallelismConfig:
        if self.envs_per_actor % self.env_groups:
            raise ValueError(f"parallelism.envs_per_actor={self.envs_per_actor} must be a multiple of "
                             f"parallelism.env_groups={self.env_groups}")
        return self


class RoleResources(_Section):
    gpus: float = Field(default=0.0, ge=0)
    """Devices per instance of the role; fractions (0.25) share one device."""
    cpus: float = Field(default=1.0, gt=0)
    """CPU cores per instance."""
    memory_gb: float = Field(default=1.0, ge=0)
    """Host memory per instance, GiB."""
    nodes: list[str] = Field(default_factory=list)
    """Node labels every instance's node must have (all of them): ``key=value`` (the Ray node
    label ``key`` has that value) or ``key`` (the node has the label at all), e.g.
    ``[zone=us-east-1a]`` or ``[ray.io/accelerator-type=H100]``. Empty: any node. A label no
    node has is a start-up error naming the role and the label."""


class ResourcesConfig(_Section):
    learner: RoleResources = Field(default_factory=lambda: RoleResources(gpus=1.0, cpus=2.0, memory_gb=16.0))
    """Resources of one learner (the scheduler keeps learner groups inside one island)."""
    actor: RoleResources = Field(default_factory=lambda: RoleResources(gpus=0.0, cpus=1.0, memory_gb=2.0))
    """Resources of one actor (packed tightly, may go anywhere)."""
    parameter_server: RoleResources = Field(default_factory=lambda: RoleResources(gpus=0.0, cpus=1.0, memory_gb=8.0))
    """Resources of one parameter-server shard (placed near the learners)."""
    policies: dict[str, RoleResources] = Field(default_factory=dict)
    """With several ``multi_agent.policies``: each policy's learner process by policy name, its
    ``nodes`` labels keeping it on the nodes that carry them; a policy not named takes ``learner``."""


class TrainConfig(_Section):
    total_env_steps: int = Field(default=100_000, gt=0)
    """Stop after this many environment steps (all actors together)."""
    seed: int = 1
    """Master seed; actors, envs and torch derive theirs from it."""
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    """Split each minibatch into this many micro-batches before one optimizer step."""
    pipeline_depth: int = Field(default=0, ge=0)
    """Rollouts actors may run ahead of the learner: rollout ``i`` uses parameters at least
    version ``i - pipeline_depth`` (0 = actors and learner alternate). Each step of depth
    keeps one more batch in flight and makes the data one version staler."""
    overlap_compute_comm: bool = False
    """Overlap the learners' gradient all-reduce with the backward pass. Not active yet:
    a run with it set says so at start-up and all-reduces after backward."""
    mixed_precision: Literal["no", "bf16"] = "no"
    """bf16 autocast for the learner's forward/backward pass."""
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    """Learner device; auto picks cuda when available."""
    torch_threads: int = Field(default=1, ge=1)
    """Torch intra-op threads per process (1 avoids oversubscription on shared cores)."""
    retain_freed_memory_mb: int = Field(default=256, ge=0)
    """MiB of freed heap each actor and learner process keeps for reuse instead of returning
    it to the kernel, so repeated updates do not fault their tensors in again (glibc only,
    ``kilorl.roles.heap``); 0 keeps the C library's defaults."""
    stop_return: float | None = None
    """Stop early once the rolling episode return reaches this (None: run to the end)."""
    time_budget_s: float | None = Field(default=None, gt=0)
    """Stop after this many seconds of training (start-up not counted), at the first iteration
    past it, and checkpoint that state as at the end of ``total_env_steps`` (Sample Factory's
    ``train_for_seconds``, RLlib's ``time_total_s`` stop); None: no time limit."""
    restart_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds every data path (``on_policy``, ``replay``, ``queue``) waits for a lost
    rollout to come again: from a batch slot's first failure (its env runner died and is being
    restarted by Ray, or its store worker came back empty and the version is republished)
    until the run fails. Generous by default: a restart on a loaded machine takes seconds
    (a process start, imports, envs, the store reconnect, ``store.reconnect_timeout_s``)."""


class CheckpointConfig(_Section):
    every_env_steps: int | None = Field(default=None, gt=0)
    """Write a checkpoint every this many env steps (None: only at the end)."""
    keep: int = Field(default=3, ge=1)
    """How many checkpoints to keep in the run directory."""


class EvaluationConfig(_Section):
    """Evaluation during training: whole episodes with the learner's current policy, on
    their own environment, so the run can stop on (and keep) a policy that holds rather
    than on a rolling training return that lags it."""

    every_env_steps: int | None = Field(default=None, gt=0)
    """Evaluate every this many env steps (None: never during training)."""
    episodes: int = Field(default=10, ge=1)
    """Episodes per evaluation."""
    deterministic: bool = True
    """Take the policy's mode (False: sample, from an RNG of its own)."""
    seed: int = 2_000_000
    """Seed of each evaluation's first episode (episode k uses seed + k). Apart from
    ``kilorl eval``'s default (1,000,000), so the episodes a run picks its policy on are
    not the ones it is judged on afterwards."""
    stop_return: float | None = None
    """Stop once ``stop_consecutive`` evaluations in a row reach this mean return; the
    final checkpoint is then the policy last evaluated (None: evaluate and report only)."""
    stop_consecutive: int = Field(default=1, ge=1)
    """Evaluations in a row that must reach ``stop_return``. One evaluation of a policy
    that is still moving can be lucky; two in a row rarely are (docs/benchmarks.md)."""
    keep_best: bool = False
    """Keep the best evaluated policy so far (ties go to the later one) in
    ``checkpoints/best``: the run's result and what ``kilorl eval RUN_DIR`` plays. A resume
    still continues from the newest checkpoint."""
    policy: str | None = None
    """With several policies (``multi_agent.policies``): the policy whose mean return (the sum
    over its own agents) an evaluation is judged on (``eval_return_mean``, ``stop_return``,
    ``keep_best``); None: the episode's return, summed over all agents. A hierarchy's high
    level earns the env reward alone, so its return is the task's."""

    @model_validator(mode="after")
    def _needs_a_cadence(self) -> EvaluationConfig:
        if self.every_env_steps is None:
            for field, unset in (("stop_return", None), ("keep_best", False)):
                if getattr(self, field) != unset:
                    raise ValueError(f"evaluation.{field} needs evaluation.every_env_steps")
        return self


class LoggingConfig(_Section):
    report_every_s: float = Field(default=2.0, ge=0)
    """Minimum seconds between metric reports (0: one report per learner update)."""
    return_window: int = Field(default=20, ge=1)
    """Episodes in the rolling mean reported as episode_return_mean."""
    tensorboard: bool = True
    """Write TensorBoard event files into the run directory."""
    progress: bool = True
    """Show a live progress bar on the terminal."""


class Config(_Section):
    env: EnvConfig
    """The environment to train on."""
    algo: AlgoSection = Field(default_factory=PPOConfig)
    """Algorithm and its hyperparameters; ``algo.name`` selects which (any registered algorithm:
    ppo, a2c, and those of installed plugins)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Network architecture."""
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    """How many of each role run."""
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    """Per-role resource requests used by the scheduler on a cluster (ignored locally)."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """Length, seeding and numerics of the run."""
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    """How learners compress gradients before all-reducing them (``method: none`` by default:
    dense fp32 buckets). Only matters with more than one learner."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoint cadence."""
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """Evaluation episodes during training, and stopping on their return."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Metrics and progress reporting."""
    store: StoreSection = Field(default_factory=StoreSection)
    """The store workers that hold the parameters (started per Ray node, or given)."""
    sync: SyncSection = Field(default_factory=SyncSection)
    """How actors follow parameter versions (sync, async, hybrid) and their durability."""
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    """Prometheus metrics from every role and memory-leak detection (docs/monitor.md); off by default."""
    replay_buffer: ReplayBufferConfig | None = None
    """A replay algorithm's table in the store workers (sharded, optionally compressed); None:
    in the learner's process. Only for algorithms on the replay data path."""
    multi_agent: MultiAgentConfig | None = None
    """Which policy each agent of a PettingZoo environment acts with (``policy_mapping`` by
    agent-name pattern); None: every agent column on the one policy of ``algo`` and ``model``."""

    @model_validator(mode="before")
    @classmethod
    def _algo_defaults_to_ppo(cls, data: Any) -> Any:
        """``algo: {lr: ...}`` without a name means PPO, the default algorithm."""
        if isinstance(data, dict) and isinstance(data.get("algo"), dict) and "name" not in data["algo"]:
            data = {**data, "algo": {"name": "ppo", **data["algo"]}}
        return data

    @model_validator(mode="after")
    def _batch_fits_the_algorithm(self) -> Config:
        if self.parallelism.actor == 0:  # before the batch checks, which count the actors' env columns
            check_actorless(self.algo.name, algo_spec(self.algo.name).data_path, self.replay_buffer)
        if self.model.recurrent is not None:  # the minibatch unit is an env column or a chunk, not a step
            self.algo.check_recurrent(self.parallelism, self.train.gradient_accumulation_steps)
        else:
            self.algo.check_batch(self.rollout_steps, self.train.gradient_accumulation_steps)
        self.algo.check_parallelism(self.parallelism)
        self.sync.check(self.train.pipeline_depth)
        self._algorithm_fits_the_sections()
        return self

    def _algorithm_fits_the_sections(self) -> None:
        """Options of other sections that the algorithm's data path or model cannot honour."""
        spec = algo_spec(self.algo.name)
        if self.model.dueling and spec.model == "kilorl.models:build_actor_critic":
            raise ValueError(f"model.dueling: algo.name={self.algo.name} uses an actor-critic network, which has "
                             "no dueling head (a Q-learning algorithm such as dqn has)")
        if spec.data_path in ("replay", "queue") and self.sync.mode == "sync":
            raise ValueError(f"sync.mode=sync: algo.name={self.algo.name} is on the {spec.data_path} data path, "
                             "whose env runners take the newest version without waiting (use async)")
        if self.replay_buffer is not None and spec.data_path != "replay":
            raise ValueError(f"replay_buffer: algo.name={self.algo.name} is on the {spec.data_path} data path, "
                             "which keeps no replay table (remove the section or pick a replay algorithm)")
        if self.replay_buffer is not None:
            self.replay_buffer.fit_to(self.algo)
        if spec.data_path == "replay":
            for field in ("normalize_obs", "normalize_reward"):
                if getattr(self.env, field):
                    raise ValueError(f"env.{field}: not supported with algo.name={self.algo.name} (replay data path): "
                                     "stored transitions would keep the statistics of the moment they were added")
        if self.multi_agent is not None:
            self.multi_agent.check_run(self.algo.name, spec.alive_mask, self.model.actor_inputs,
                                       self.evaluation.every_env_steps, self.evaluation.policy)
            if self.multi_agent.several:
                check_policies(self, _messages)
        elif self.evaluation.policy is not None:
            raise ValueError(f"evaluation.policy={self.evaluation.policy!r}: names one of several policies "
                             "(multi_agent.policies); this run has no multi_agent section")
        if self.algo.discount is None and self.env.normalize_reward:
            raise ValueError(f"env.normalize_reward: algo.name={self.algo.name} declares no discount to scale by")

    def policy_configs(self) -> dict[str, Config]:
        """Each of ``multi_agent.policies``' view of the run: this config with the policy's own
        ``algo`` and ``model`` (``kilorl.config_policies``); ``{}`` without the section."""
        return policy_configs(self, _messages)

    @model_validator(mode="after")
    def _leaks_name_running_instances(self) -> Config:
        """An injected leak on an actor or learner rank the run does not have would do nothing."""
        counts = {"actor": self.parallelism.actor, "learner": self.parallelism.learner}
        for i, leak in enumerate(self.monitor.inject_leaks):
            if leak.role in counts and leak.rank >= counts[leak.role]:
                raise ValueError(f"monitor.inject_leaks.{i}.rank={leak.rank}: the run has {counts[leak.role]} "
                                 f"{leak.role}(s), ranks 0..{counts[leak.role] - 1}")
        return self

    @property
    def iterations(self) -> int:
        """Learner updates the run takes (the last rollout may overshoot total_env_steps)."""
        return -(-self.train.total_env_steps // self.rollout_steps)

    @property
    def rollout_steps(self) -> int:
        """Env steps one iteration consumes (on-policy: a rollout from every env runner;
        replay: one rollout per learner), as the algorithm's section says."""
        return self.algo.iteration_env_steps(self.parallelism)


def _messages(err: ValidationError) -> str:
    return format_validation_error(Config, err)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``section.field=value``; the value is read as YAML (``1e-3``, ``[64, 64]``)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected section.field=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r}: empty field name")
    value = yaml.safe_load(raw) if raw.strip() else ""
    # YAML 1.1 reads "1e-3" as a string; accept scientific notation as a float.
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in "eE.") else value
        except ValueError:
            pass
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {part} is not a section")
            node = child
        node[path[-1]] = value
    return data


def config_from_dict(data: dict[str, Any], *, check_env: bool = True) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("invalid config: the top level must be a mapping of sections")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(Config, err)) from None
    if check_env:
        from kilorl.envs import check_env_id

        problem = check_env_id(cfg.env.id)
        if problem:
            raise ConfigError(f"invalid config:\n  env.id: {problem}")
    return cfg


def _yaml_float_fix(data: Any) -> Any:
    """YAML 1.1 reads ``3e-4`` as a string; turn such strings back into floats."""
    if isinstance(data, dict):
        return {k: _yaml_float_fix(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_yaml_float_fix(v) for v in data]
    if isinstance(data, str):
        try:
            if any(c in data for c in "eE") and data.strip()[0] in "+-.0123456789":
                return float(data)
        except (ValueError, IndexError):
            return data
    return data


def load_config(path: str | Path, overrides: list[str] | None = None, *, check_env: bool = True) -> Config:
    """Read a YAML file, apply ``section.field=value`` overrides, validate."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not valid YAML: {err}") from None
    data = _yaml_float_fix(data)
    data = apply_overrides(data, overrides or [])
    return config_from_dict(data, check_env=check_env)


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
