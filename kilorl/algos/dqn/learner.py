"""DQN's update: gradient steps on samples from its replay table, at ``gradient_steps`` per
``train_freq`` env steps once ``learning_starts`` env steps are in, with a target network
updated every ``target_update_interval`` env steps.

Built from the learner building blocks (``kilorl.algos.common``): the Q network from the
spec's model builder (the one env runners act with), its target, one ``OptimizerStep``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kilorl.algos import keys
from kilorl.algos.api import AlgorithmLearner, LearnerContext
from kilorl.algos.common.checkpointing import NamedParts
from kilorl.algos.common.device import pick_device
from kilorl.algos.common.optimizer_step import OptimizerStep
from kilorl.algos.common.targets import TargetUpdater
from kilorl.algos.common.transitions import load_table_state, table_state
from kilorl.algos.dqn.config import DQNConfig
from kilorl.algos.dqn.transitions import COLUMNS, WEIGHT, TransitionTable
from kilorl.envs.normalization import RunningMeanStd


class DQNLearner(AlgorithmLearner):
    """Online and target Q networks, Adam, and the replay table the data path fills."""

    def __init__(self, algo: DQNConfig, ctx: LearnerContext) -> None:
        self.algo, self.ctx = algo, ctx
        self.device = pick_device(ctx.device)
        self.q = ctx.build_model().to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.parts = NamedParts()
        self.parts.module("target", self.target)
        self.module = ctx.grad_comm.prepare(self.q)
        self.opt = OptimizerStep(self.q, ctx.grad_comm, algo.lr, algo.max_grad_norm,
                                 world_size=ctx.world_size, mixed_precision=ctx.mixed_precision)
        self.targets = TargetUpdater(algo.target_update_interval, algo.tau)
        self.table: TransitionTable | None = None
        self.env_steps = 0
        self.updates = 0
        """Gradient steps taken."""
        self.credit = 0.0
        """Gradient steps owed (fractional) by the env steps inserted since the last update."""
        self.obs_rms, self.ret_rms = RunningMeanStd(ctx.obs_space.shape), RunningMeanStd(())

    def make_replay_table(self) -> TransitionTable:
        space = self.ctx.obs_space
        self.table = TransitionTable(self.algo.buffer_size, space.shape, space.dtype, self.algo.gamma,
                                     self.algo.n_step, seed=self.ctx.seed * 1000 + self.ctx.rank,
                                     storage=self.ctx.replay_storage, name=f"dqn-{self.ctx.rank}")
        return self.table

    def update(self, source: TransitionTable, env_steps_total: int) -> dict[str, float]:
        algo = self.algo
        new = env_steps_total - self.env_steps
        self.env_steps = env_steps_total
        if env_steps_total <= algo.learning_starts or len(source) < max(1, source.min_size_to_sample):
            return {"gradient_steps": 0.0}
        n = self._steps_owed(source, new)
        self.targets.maybe_update(self.target, self.q, env_steps_total)
        losses, qs, norms = [], [], []
        if n:
            source.set_progress(env_steps_total / max(1, self.ctx.total_env_steps))
            # every step's rows drawn at once (the table does not change during the phase): one
            # gather and one tensor per column instead of n of each
            rows = source.sample(algo.batch_size * n)
            cols = {k: torch.as_tensor(rows[k], device=self.device) for k in (*COLUMNS, WEIGHT) if k in rows}
            errors = []
            for i in range(n):
                part = slice(i * algo.batch_size, (i + 1) * algo.batch_size)
                loss, q_mean, norm, td = self._step({k: v[part] for k, v in cols.items()})
                losses.append(loss)
                qs.append(q_mean)
                norms.append(norm)
                errors.append(td)
            if source.prioritized:
                source.update_priorities(torch.cat(errors).cpu().numpy())
        self.updates += n
        if not n:
            return {"gradient_steps": 0.0}
        return {"gradient_steps": float(n), "td_loss": float(torch.stack(losses).mean()),
                "q_mean": float(torch.stack(qs).mean()), "grad_norm": float(torch.stack(norms).mean())}

    def _steps_owed(self, source: TransitionTable, new_env_steps: int) -> int:
        """Gradient steps this update takes: what the table's rate limiter admits, else
        ``gradient_steps`` per ``train_freq`` env steps (fractions carried over)."""
        budget = source.sample_budget()
        if budget is not None:
            return budget // self.algo.batch_size
        self.credit += new_env_steps * self.algo.gradient_steps / self.algo.train_freq
        n = int(self.credit)
        self.credit -= n
        return n

    def _step(self, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step of the Huber TD loss (each row weighted by its importance weight
        when the table is prioritized); returns (loss, mean Q taken, grad norm, TD errors)."""
        with torch.no_grad():
            next_q = self.target(t["next_obs"])
            if self.algo.double_q:
                best = self.q(t["next_obs"]).argmax(-1, keepdim=True)
                next_v = next_q.gather(-1, best).squeeze(-1)
            else:
                next_v = next_q.max(-1).values
            target = t["reward"] + t["discount"] * next_v
        self.opt.zero_grad()
        with self.opt.autocast():
            q = self.module(t["obs"]).float().gather(-1, t["action"].long().unsqueeze(-1)).squeeze(-1)
        if WEIGHT in t:
            loss = (t[WEIGHT] * F.smooth_l1_loss(q, target, reduction="none")).mean()
        else:
            loss = F.smooth_l1_loss(q, target)
        loss.backward()
        norm = self.opt.step()
        return loss.detach(), q.detach().mean(), norm.detach(), (q.detach() - target).float()

    # ---- publishing and checkpoints -----------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        return {keys.MODEL + k: v.detach().float().cpu().numpy() for k, v in self.q.state_dict().items()}

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        state = {k[len(keys.MODEL):]: torch.as_tensor(np.array(v)) for k, v in weights.items() if k.startswith(keys.MODEL)}
        self.q.load_state_dict(state)
        self.target.load_state_dict(state)

    def policy_state(self) -> dict[str, Any]:
        return {"model": {k: v.detach().cpu() for k, v in self.q.state_dict().items()}, "obs_rms": self.obs_rms.state()}

    def state(self) -> dict[str, Any]:
        tensors, parts_meta = self.parts.state()
        meta: dict[str, Any] = {"env_steps": self.env_steps, "credit": self.credit,
                                "target_done_until": self.targets.done_until, **parts_meta}
        tensors.update(table_state(self.table, meta))  # a store table stays there: its name only
        return {
            "model": {k: v.detach().cpu() for k, v in self.q.state_dict().items()},
            "optimizer": self.opt.state_dict(),
            "obs_rms": self.obs_rms.state(), "ret_rms": self.ret_rms.state(),
            "updates": self.updates, "torch_rng": torch.get_rng_state(),
            "tensors": tensors, "extra_meta": meta,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])
        tensors, meta = state.get("tensors", {}), state.get("extra_meta", {})
        if tensors:
            self.parts.load(tensors, meta)
        else:  # weights only (a durable resume's published version): the target starts as the online network
            self.target.load_state_dict(state["model"])
        self.env_steps = int(meta.get("env_steps", 0))
        self.credit = float(meta.get("credit", 0.0))
        self.targets.done_until = int(meta.get("target_done_until", self.env_steps // self.algo.target_update_interval))
        load_table_state(self.table, tensors, meta)
