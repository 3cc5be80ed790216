"""What actor-critic algorithms share: model, optimizer, normalizers, publishing, checkpoints.

Composition, not inheritance: PPO and A2C each hold an ``ActorCriticState`` and write
only their update. Their behaviour policy samples from the model and records V(s) (and
the action's log-prob where asked), and V of the observations nobody acted on (final
observations, s_T) for the bootstrap.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.algos.api import AlgorithmLearner, BehaviourPolicy, EnvRunnerContext, Extra, LearnerContext, State, StepContext
from kilorl.algos.common.device import pick_device
from kilorl.algos.flat_params import FlatParameters
from kilorl.algos.optim import FunctionalAdam
from kilorl.core import Rollout
from kilorl.envs.normalization import Moments, RunningMeanStd

if TYPE_CHECKING:
    from kilorl.algos.config_base import OnPolicyConfig

Optimizer = torch.optim.Optimizer | FunctionalAdam
"""What a learner steps: a ``torch.optim`` optimizer or kiloRL's ``FunctionalAdam``."""

torch.distributions.Distribution.set_default_validate_args(False)


def adam(params: list[torch.nn.Parameter], lr: float, flat: FlatParameters | None = None) -> FunctionalAdam:
    """Adam with the fused kernel where this torch build has one (measured ~15% faster step),
    without importing ``torch._dynamo`` (``kilorl.algos.optim``); one call over ``flat``."""
    return FunctionalAdam(params, lr=lr, eps=1e-5, flat=flat)


def rmsprop(params: list[torch.nn.Parameter], lr: float, flat: FlatParameters | None = None) -> torch.optim.Optimizer:
    """RMSprop as the A2C paper and SB3 configure it (alpha 0.99, eps 1e-5); it steps the
    parameters one by one (``flat``, if any, keeps their gradients gathered for clipping)."""
    return torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-5)


class ActorCriticState:
    """Model, optimizer and normalizer statistics of one learner rank, kept identical across ranks."""

    def __init__(self, algo: OnPolicyConfig, ctx: LearnerContext,
                 make_optimizer: Callable[[list[torch.nn.Parameter], float, FlatParameters | None], Optimizer] = adam,
                 ) -> None:
        self.algo, self.ctx, self.grad_comm = algo, ctx, ctx.grad_comm
        self.device = pick_device(ctx.device)
        self.model = ctx.build_model().to(self.device)
        self.module = self.grad_comm.prepare(self.model)
        self.params = list(self.model.parameters())
        # one rank owns its gradients: keep them (and the parameters) in one buffer each, so
        # clipping and the optimizer make one call (``kilorl.algos.flat_params``)
        self.single = ctx.world_size == 1
        self.flat = FlatParameters(self.params) if self.single else None
        self._make_optimizer = make_optimizer
        self._optimizer: Optimizer | None = None
        self._optimizer_lock = threading.Lock()
        self.obs_rms = RunningMeanStd(ctx.obs_space.shape)
        self.ret_rms = RunningMeanStd(())
        self.env_steps = 0
        self.updates = 0
        self.autocast_on = ctx.mixed_precision == "bf16"

    @property
    def optimizer(self) -> Optimizer:
        """Built on first use: a ``torch.optim`` optimizer's constructor imports torch._dynamo
        (seconds), which need not delay the first publish (see ``warm_up``)."""
        with self._optimizer_lock:
            if self._optimizer is None:
                self._optimizer = self._make_optimizer(self.params, self.algo.lr, self.flat)
            return self._optimizer

    def warm_up(self) -> None:
        """Build the optimizer (run while actors collect: a ``torch.optim`` one imports dynamo)."""
        self.optimizer.zero_grad(set_to_none=True)

    def autocast(self) -> contextlib.AbstractContextManager:
        if not self.autocast_on:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def set_lr(self, env_steps_total: int) -> float:
        """Advance the step counter and apply the (optionally annealed) learning rate."""
        self.env_steps = env_steps_total
        algo = self.algo
        lr = algo.lr * self.remaining(env_steps_total) if algo.anneal_lr else algo.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def remaining(self, env_steps_total: int) -> float:
        """The share of the run still ahead, 1 -> 0: what linear schedules multiply by."""
        return max(0.0, 1.0 - env_steps_total / self.ctx.total_env_steps)

    def step(self) -> torch.Tensor:
        """Average gradients over ranks, clip, take the optimizer step; returns the grad norm."""
        self.grad_comm.synchronize(self.params)
        if self.flat is not None:
            norm = self.flat.clip_grad_norm_(self.algo.max_grad_norm)
        else:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.algo.max_grad_norm, foreach=True)
        self.optimizer.step()
        return norm

    def normalized(self, advantages: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(a - mean) / (std + 1e-8)`` with mean and std over every rank's samples.

        Each rank holds a share of the batch; summing count, sum and sum of squares over
        ranks gives the statistics of the whole batch, so the split of actors over learners
        does not change the result. One learner normalizes on its own tensor (no host sync).
        ``mask``: the statistics are the live agents' rows' only (dead columns' rows are
        normalised with them but left out of the loss).
        """
        if self.single:
            live = advantages if mask is None else advantages[mask > 0]
            return (advantages - live.mean()) / (live.std() + 1e-8)
        a = advantages.detach().double()
        if mask is not None:
            a = a[mask > 0]
        sums = self.grad_comm.sum_tensor(torch.stack([torch.tensor(float(a.numel()), dtype=torch.float64),
                                                      a.sum(), (a * a).sum()]).cpu())
        n, s1, s2 = (float(v) for v in sums)
        mean = s1 / n
        std = (max(s2 - n * mean * mean, 0.0) / max(n - 1.0, 1.0)) ** 0.5  # unbiased, as torch.std
        return (advantages - mean) / (std + 1e-8)

    def tensor(self, array: np.ndarray, flat_dims: int = 2) -> torch.Tensor:
        """``[T, N, ...]`` -> ``[T*N, ...]`` on the learner's device (a copy: Ray's views are read-only)."""
        return torch.tensor(array.reshape(-1, *array.shape[flat_dims:]), device=self.device)

    def observations(self, array: np.ndarray) -> torch.Tensor:
        """Observations as the network takes them: float32 whatever the env's dtype."""
        out = self.tensor(array)
        return out if out.dtype == torch.float32 else out.float()

    # ---- normalizers ----------------------------------------------------------------------
    def merge_moments(self, rollout: Rollout) -> None:
        """Fold the actors' raw observation/return moments (all ranks') into the statistics."""
        for rms, key in ((self.obs_rms, keys.OBS_MOMENTS), (self.ret_rms, keys.RET_MOMENTS)):
            parts = rollout.moments.get(key, [])
            if not parts:
                continue
            counts = np.array([m.count for m in parts], np.float64)
            means = np.stack([np.asarray(m.mean, np.float64).reshape(-1) for m in parts])
            vars_ = np.stack([np.asarray(m.var, np.float64).reshape(-1) for m in parts])
            n = torch.tensor([counts.sum()], dtype=torch.float64)
            s1 = torch.as_tensor((counts[:, None] * means).sum(0))
            s2 = torch.as_tensor((counts[:, None] * (vars_ + means**2)).sum(0))
            n, s1, s2 = (self.grad_comm.sum_tensor(t) for t in (n, s1, s2))
            total = float(n[0])
            if total <= 0:
                continue
            mean = (s1 / total).numpy()
            var = np.maximum((s2 / total).numpy() - mean**2, 0.0)
            rms.update(Moments(mean.reshape(rms.mean.shape), var.reshape(rms.var.shape), total))

    # ---- publishing and checkpoints -----------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        out = {keys.MODEL + k: v.detach().float().cpu().numpy() for k, v in self.model.state_dict().items()}
        for prefix, rms in ((keys.OBS_RMS, self.obs_rms), (keys.RET_RMS, self.ret_rms)):
            for k, v in rms.state().items():
                out[prefix + k] = np.asarray(v, np.float32)
        return out

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Model and normalizer statistics from published ``weights()`` (the inverse of it)."""
        model = {k[len(keys.MODEL):]: torch.as_tensor(np.array(v)) for k, v in weights.items() if k.startswith(keys.MODEL)}
        self.model.load_state_dict(model)
        for prefix, rms in ((keys.OBS_RMS, self.obs_rms), (keys.RET_RMS, self.ret_rms)):
            rms.load({k[len(prefix):]: np.asarray(v) for k, v in weights.items() if k.startswith(prefix)})

    def state(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state(),
            "ret_rms": self.ret_rms.state(),
            "updates": self.updates,
            "torch_rng": torch.get_rng_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_rms.load(state["obs_rms"])
        self.ret_rms.load(state["ret_rms"])
        self.updates = int(state["updates"])
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])


def explained_variance(returns: np.ndarray, values: np.ndarray, alive: np.ndarray | None = None) -> float:
    """1 - Var(returns - values) / Var(returns), over the live agents' rows where ``alive`` is given."""
    if alive is not None:
        returns, values = returns[alive], values[alive]
    var_y = float(np.var(returns))
    return float("nan") if var_y == 0 else 1.0 - float(np.var(returns - values)) / var_y


class ActorCriticLearner(AlgorithmLearner):
    """An ``AlgorithmLearner`` whose model, optimizer and normalizers live in ``self.ac``."""

    ac: ActorCriticState

    def warm_up(self) -> None:
        self.ac.warm_up()

    def weights(self) -> dict[str, np.ndarray]:
        return self.ac.weights()

    def state(self) -> dict[str, Any]:
        return self.ac.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.ac.load_state(state)

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.ac.load_weights(weights)


class ActorCriticPolicy(BehaviourPolicy):
    """Samples from the model's distribution; records V(s), and the action's log-prob when
    ``with_logp``; V of final observations and s_T for the bootstrap."""

    with_logp = True

    def __init__(self, algo_cfg: OnPolicyConfig, ctx: EnvRunnerContext) -> None:
        super().__init__(algo_cfg, ctx)
        self.extras = {keys.LOGP: Extra(), keys.VALUES: Extra()} if self.with_logp else {keys.VALUES: Extra()}

    def initial_state(self, n_envs: int) -> State:
        """A recurrent model's zeros (``EnvRunnerContext.model_state``); empty for a memoryless one."""
        return self.ctx.model_state(n_envs) if self.ctx.model_state is not None else {}

    def act(self, model: torch.nn.Module, obs: torch.Tensor, state: State,
            ctx: StepContext) -> tuple[torch.Tensor, dict[str, np.ndarray], State]:
        if getattr(model, "recurrent", False):  # rows of finished episodes were zeroed by ``reset``
            actions, logp, values, new = model.act(obs, state_tensors(state))
            state = state_arrays(new)
        else:
            actions, logp, values = model.act(obs)
        rec = {keys.VALUES: values.numpy()}
        if self.with_logp:
            rec[keys.LOGP] = logp.numpy()
        return actions, rec, state

    @torch.no_grad()
    def observe(self, model: torch.nn.Module, obs: torch.Tensor, state: State | None = None) -> dict[str, np.ndarray]:
        if getattr(model, "recurrent", False):
            return {keys.VALUES: model.value(obs, state_tensors(state or {})).numpy()}
        return {keys.VALUES: model.value(obs).numpy()}


def state_tensors(state: State) -> dict[str, torch.Tensor]:
    """A policy's numpy state as the model's tensors (no copy)."""
    return {k: torch.from_numpy(v) for k, v in state.items()}


def state_arrays(state: dict[str, torch.Tensor]) -> State:
    """A model's state tensors as the policy's contiguous numpy arrays."""
    return {k: v.detach().contiguous().numpy() for k, v in state.items()}
