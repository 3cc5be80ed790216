"""SAC's update: critic steps on samples from its replay table at ``utd_ratio`` gradient steps
per env step once ``learning_starts`` env steps are in, a policy and temperature phase every
``policy_delay`` critic steps, and Polyak target critics after every critic step.

Three optimizers (policy, critics, temperature), each an ``OptimizerStep``; the policy is the
spec's model (``state()["model"]``, the only tensors published to env runners), everything
else is a named part of the checkpoint (``NamedParts``).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from kilorl.algos import keys
from kilorl.algos.api import AlgorithmLearner, LearnerContext
from kilorl.algos.common.checkpointing import NamedParts
from kilorl.algos.common.device import pick_device
from kilorl.algos.common.offline_mix import SOURCE_COLUMN, MixedSource, OfflineTable, RecordedRows, sample_batches
from kilorl.algos.common.optimizer_step import OptimizerStep
from kilorl.algos.common.targets import soft_update
from kilorl.algos.common.transitions import COLUMNS, TransitionTable, load_table_state, table_state
from kilorl.algos.sac.config import SACConfig
from kilorl.algos.sac.model import QEnsemble
from kilorl.envs.normalization import RunningMeanStd


def default_target_entropy(action_space: Any) -> float:
    """``-|A|``: minus the number of action dimensions (Haarnoja et al., 2018b)."""
    return -float(np.prod(action_space.shape))


def min_of_random_subset(q: torch.Tensor, num_min: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The minimum over ``num_min`` of the ``[E, B]`` critics' rows, drawn without replacement
    (all ``E``: the twin minimum, no draw)."""
    if num_min >= q.shape[0]:
        return q.min(0).values
    rows = torch.randperm(q.shape[0], generator=generator)[:num_min]
    return q[rows.to(q.device)].min(0).values


class Temperature(nn.Module):
    """The entropy coefficient ``alpha = exp(log_alpha)``, learnt through its logarithm."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(alpha)))  # 1-d: checkpoints keep no 0-d tensors

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()[0]


class SACLearner(AlgorithmLearner):
    """Policy, critic ensemble and its target, temperature, and the replay table."""

    def __init__(self, algo: SACConfig, ctx: LearnerContext) -> None:
        self.algo, self.ctx = algo, ctx
        self.device = pick_device(ctx.device)
        self.actor = ctx.build_model().to(self.device)
        obs_dim = int(np.prod(ctx.obs_space.shape))
        self.act_dim = int(np.prod(ctx.action_space.shape))
        hidden = list(algo.critic_hidden_sizes or self.actor.hidden_sizes)
        self.critic = QEnsemble(obs_dim, self.act_dim, hidden, self.actor.activation, algo.num_qs,
                                algo.critic_layer_norm).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = Temperature(algo.alpha or algo.init_alpha).to(self.device)
        self.target_entropy = algo.target_entropy if algo.target_entropy is not None \
            else default_target_entropy(ctx.action_space)
        for module in (self.actor, self.critic, self.temperature):
            ctx.grad_comm.prepare(module)

        def step(module: nn.Module, lr: float) -> OptimizerStep:
            return OptimizerStep(module, ctx.grad_comm, lr, algo.max_grad_norm, world_size=ctx.world_size,
                                 mixed_precision=ctx.mixed_precision)

        self.actor_opt, self.critic_opt = step(self.actor, algo.policy_lr), step(self.critic, algo.q_lr)
        self.alpha_opt = step(self.temperature, algo.alpha_lr)
        self.parts = NamedParts()
        for name, module in (("critic", self.critic), ("critic_target", self.critic_target),
                             ("temperature", self.temperature)):
            self.parts.module(name, module)
        self.parts.optimizer("critic", self.critic_opt)
        self.parts.optimizer("temperature", self.alpha_opt)
        self.table: TransitionTable | None = None
        self.offline: RecordedRows | None = None
        self.env_steps, self.updates, self.credit = 0, 0, 0.0
        """Env steps seen, critic steps taken, critic steps owed (fractional) by new env steps."""
        self.obs_rms, self.ret_rms = RunningMeanStd(ctx.obs_space.shape), RunningMeanStd(())

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy coefficient in use: the fixed one, or the tuned one (no gradient)."""
        if self.algo.alpha is not None:
            return torch.tensor(self.algo.alpha, device=self.device)
        return self.temperature().detach()

    def make_replay_table(self) -> TransitionTable | MixedSource:
        """The online table, mixed with the recorded rows at their share when the run has them."""
        space = self.ctx.obs_space
        self.table = TransitionTable(self.algo.buffer_size, space.shape, space.dtype, self.algo.gamma,
                                     self.algo.n_step, seed=self.ctx.seed * 1000 + self.ctx.rank,
                                     storage=self.ctx.replay_storage, name=f"sac-{self.ctx.rank}",
                                     action_shape=(self.act_dim,), action_dtype=np.float32)
        offline = self.ctx.offline
        if offline is None:
            return self.table
        rows = dict(offline.columns)
        scale, bias = self.actor.action_scale.cpu().numpy(), self.actor.action_bias.cpu().numpy()
        terminated = rows.pop("terminated").astype(np.float32)
        rows["action"] = np.clip((rows["action"].reshape(len(terminated), -1) - bias) / scale, -1.0, 1.0).astype(np.float32)
        rows["discount"] = (self.algo.gamma * (1.0 - terminated)).astype(np.float32)
        rows["reward"] = rows["reward"].astype(np.float32)
        rows["obs"], rows["next_obs"] = (rows[k].astype(space.dtype) for k in ("obs", "next_obs"))
        seed = self.ctx.seed * 1000 + 500 + self.ctx.rank
        make = self.ctx.offline_storage  # the store workers' immutable table, or one in this process
        self.offline = make(f"sac-{self.ctx.rank}", rows, seed) if make is not None else OfflineTable(rows, seed)
        return MixedSource(self.table, self.offline, offline.ratio)

    def update(self, source: TransitionTable, env_steps_total: int) -> dict[str, float]:
        algo = self.algo
        new = env_steps_total - self.env_steps
        self.env_steps = env_steps_total
        if env_steps_total <= algo.learning_starts or len(source) == 0:
            return {"gradient_steps": 0.0}
        self.credit += new * algo.utd_ratio
        n = int(self.credit)
        self.credit -= n
        if not n:
            return {"gradient_steps": 0.0}
        rows = sample_batches(source, algo.batch_size, n)  # every step's rows at once: one gather per column
        cols = {k: torch.as_tensor(rows[k], device=self.device) for k in (*COLUMNS, SOURCE_COLUMN) if k in rows}
        stats: dict[str, list[torch.Tensor]] = {}
        for i in range(n):
            part = slice(i * algo.batch_size, (i + 1) * algo.batch_size)
            batch = {k: v[part] for k, v in cols.items()}
            for k, v in self._critic_step(batch).items():
                stats.setdefault(k, []).append(v)
            self.updates += 1
            if self.updates % algo.policy_delay == 0:
                for _ in range(algo.policy_delay):
                    for k, v in self._policy_step(batch["obs"]).items():
                        stats.setdefault(k, []).append(v)
        out = {k: float(torch.stack(v).float().mean()) for k, v in stats.items()}
        return {"gradient_steps": float(n), "alpha": float(self.alpha), **out}

    def _critic_step(self, t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One step of the soft TD loss (SB3's ``0.5 * sum_e MSE_e``), then the Polyak targets."""
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(t["next_obs"])
            next_q = min_of_random_subset(self.critic_target(t["next_obs"], next_a), self.algo.num_min_qs)
            target = t["reward"] + t["discount"] * (next_q - self.alpha * next_logp)
        self.critic_opt.zero_grad()
        with self.critic_opt.autocast():
            q = self.critic(t["obs"], t["action"]).float()
        loss = 0.5 * ((q - target.unsqueeze(0)) ** 2).mean(-1).sum()
        loss.backward()
        self.critic_opt.step()
        soft_update(self.critic_target, self.critic, self.algo.tau)
        out = {"critic_loss": loss.detach(), "q_mean": q.detach().mean()}
        if SOURCE_COLUMN in t:  # per-source metrics of a mixed batch (its share is exact, so both exist)
            q_rows, offline = q.detach().mean(0), t[SOURCE_COLUMN]
            if offline.any():
                out["offline_q_mean"] = q_rows[offline].mean()
            if not offline.all():
                out["online_q_mean"] = q_rows[~offline].mean()
        return out

    def _policy_step(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """``E[alpha log pi(a|s) - Q(s, a)]`` with ``a`` reparameterised, then the temperature
        toward ``target_entropy`` (SB3's loss on ``log_alpha``)."""
        self.actor_opt.zero_grad()
        self.critic.requires_grad_(False)  # the gradient flows through the critics to the action only
        try:
            with self.actor_opt.autocast():
                a, logp = self.actor.sample(obs)
                q = self.critic(obs, a).float()
            q_pi = q.min(0).values if self.algo.num_min_qs >= self.algo.num_qs else q.mean(0)
            loss = (self.alpha * logp.float() - q_pi).mean()
            loss.backward()
        finally:
            self.critic.requires_grad_(True)
        self.actor_opt.step()
        out = {"actor_loss": loss.detach(), "entropy": -logp.detach().float().mean()}
        if self.algo.alpha is None:
            self.alpha_opt.zero_grad()
            alpha_loss = -(self.temperature.log_alpha * (logp.detach().float() + self.target_entropy)).mean()
            alpha_loss.backward()
            self.alpha_opt.step()
            out["alpha_loss"] = alpha_loss.detach()
        return out

    # ---- publishing and checkpoints -----------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """The policy alone: env runners never fetch the critics."""
        return {keys.MODEL + k: v.detach().float().cpu().numpy() for k, v in self.actor.state_dict().items()}

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """A published version holds the policy only; the critics stay the checkpoint's."""
        state = {k[len(keys.MODEL):]: torch.as_tensor(np.array(v)) for k, v in weights.items() if k.startswith(keys.MODEL)}
        self.actor.load_state_dict(state)

    def policy_state(self) -> dict[str, Any]:
        return {"model": {k: v.detach().cpu() for k, v in self.actor.state_dict().items()}, "obs_rms": self.obs_rms.state()}

    def state(self) -> dict[str, Any]:
        tensors, meta = self.parts.state()
        meta.update(env_steps=self.env_steps, credit=self.credit)
        offline_rng = self.offline.rng_state() if self.offline is not None else None
        if offline_rng is not None:  # the rows are the dataset's; only the sampler's place is state
            meta["offline_rng"] = offline_rng
        tensors.update(table_state(self.table, meta))
        return {
            "model": {k: v.detach().cpu() for k, v in self.actor.state_dict().items()},
            "optimizer": self.actor_opt.state_dict(),
            "obs_rms": self.obs_rms.state(), "ret_rms": self.ret_rms.state(),
            "updates": self.updates, "torch_rng": torch.get_rng_state(),
            "tensors": tensors, "extra_meta": meta,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["model"])
        self.actor_opt.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])
        tensors, meta = state.get("tensors", {}), state.get("extra_meta", {})
        if not tensors:
            raise ValueError("a SAC checkpoint must hold its critics and temperature (state()['tensors'])")
        self.parts.load(tensors, meta)
        self.env_steps = int(meta.get("env_steps", 0))
        self.credit = float(meta.get("credit", 0.0))
        load_table_state(self.table, tensors, meta)
        if self.offline is not None and "offline_rng" in meta:
            self.offline.set_rng_state(meta["offline_rng"])
