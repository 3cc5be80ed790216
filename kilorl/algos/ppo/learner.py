"""PPO's update: GAE over the ``[T, N]`` rollout, then minibatch epochs of the clipped loss."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from kilorl.algos import keys
from kilorl.algos.actor_critic import ActorCriticLearner, ActorCriticState, explained_variance
from kilorl.algos.gae import rollout_gae
from kilorl.algos.ppo.loss import ppo_loss
from kilorl.algos.sequences import column_minibatches, flat_rows, rollout_forward

if TYPE_CHECKING:
    from kilorl.algos.api import LearnerContext, RolloutBatch
    from kilorl.algos.ppo.config import PPOConfig
    from kilorl.core import Rollout

_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


Minibatch = torch.Tensor | slice
"""Rows of the flat ``[T * N]`` batch: an index tensor, or a slice for the whole batch."""

Forward = Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""Log-probs, entropies and values of a minibatch's ``i``-th micro-batch."""


def minibatches(T: int, N: int, envs_per_actor: int, num_minibatches: int, device: torch.device) -> list[Minibatch]:
    """One epoch's minibatches: index sets into the flat ``[T * N]`` batch.

    Drawn over (time step, env within an actor) positions, a minibatch takes its positions
    from every actor's block of ``envs_per_actor`` env columns. A rank holding some of the
    actors draws the same positions (same seed), so the ranks' minibatches together are
    the one learner's minibatch: 1 and K learners take the same steps. With one block (one
    actor) this is a plain random permutation of the batch.

    With ``num_minibatches == 1`` the one minibatch is the whole batch, and its loss (a mean)
    does not depend on the order of its rows: it is ``slice(0, T * N)``, a view, with no
    permutation drawn and no rows gathered (about 7% of a CartPole update's epoch).
    """
    if num_minibatches == 1:
        return [slice(0, T * N)]
    block = envs_per_actor if envs_per_actor > 0 and N % envs_per_actor == 0 else N
    positions = T * block
    perm = torch.randperm(positions, device=device)
    base = (perm // block) * N + perm % block
    blocks = torch.arange(0, N, block, device=device)
    per = max(1, positions // num_minibatches)
    return [(base[s : s + per, None] + blocks[None, :]).reshape(-1) for s in range(0, positions, per)]


def micro_batches(idx: Minibatch, parts: int) -> list[Minibatch]:
    """``idx`` in ``parts`` consecutive pieces, sized as ``torch.chunk`` sizes them."""
    if isinstance(idx, torch.Tensor):
        return list(idx.chunk(parts))
    size = idx.stop - idx.start
    step = -(-size // parts)
    return [slice(s, min(s + step, idx.stop)) for s in range(idx.start, idx.stop, step)]


def rows(idx: Minibatch) -> int:
    return len(idx) if isinstance(idx, torch.Tensor) else idx.stop - idx.start


class PPOLearner(ActorCriticLearner):
    """With several learners each rank holds a shard of the batch; ``grad_comm`` averages
    gradients (and the early-stopping KL) so every rank takes the identical step."""

    def __init__(self, algo: PPOConfig, ctx: LearnerContext) -> None:
        self.algo, self.ctx = algo, ctx
        self.ac = ActorCriticState(algo, ctx)
        self.clip_coef = algo.clip_coef

    @property
    def model(self) -> torch.nn.Module:
        return self.ac.model

    def update(self, source: RolloutBatch, env_steps_total: int) -> dict[str, float]:
        rollout = source.rollout()
        ac, algo, steps = self.ac, self.algo, rollout.steps
        ac.merge_moments(rollout)
        adv, ret = rollout_gae(rollout, algo.gamma, algo.gae_lambda)
        obs, actions = ac.observations(steps[keys.OBS]), ac.tensor(steps[keys.ACTIONS])
        old_logp, old_values = ac.tensor(steps[keys.LOGP]), ac.tensor(steps[keys.VALUES])
        advantages = torch.as_tensor(adv.reshape(-1), device=ac.device)
        alive = steps.get(keys.ALIVE)  # a multi-agent rollout: dead agent columns stay out of the loss
        mask = None if alive is None else torch.tensor(alive.reshape(-1), device=ac.device, dtype=torch.float32)
        returns = torch.as_tensor(ret.reshape(-1), device=ac.device)
        lr = ac.set_lr(env_steps_total)
        self.clip_coef = algo.clip_coef * (ac.remaining(env_steps_total) if algo.anneal_clip else 1.0)
        T, N = steps[keys.REWARDS].shape[:2]
        stats: dict[str, list[torch.Tensor]] = {k: [] for k in _STATS}
        grad_norms: list[torch.Tensor] = []
        stopped_early = 0.0
        batches = self._recurrent_batches(rollout, obs, actions) if getattr(ac.model, "recurrent", False) else \
            self._flat_batches(obs, actions)
        for _epoch in range(algo.update_epochs):
            epoch_kl: list[torch.Tensor] = []
            for idx, parts, forward in batches(T, N):
                ac.optimizer.zero_grad(set_to_none=True)
                self._minibatch(idx, parts, forward, old_logp, old_values, advantages, returns, stats, epoch_kl, mask)
                grad_norms.append(ac.step())
            if algo.target_kl is not None:
                kl = ac.grad_comm.average_scalars([float(torch.stack(epoch_kl).mean())])[0]
                if kl > algo.target_kl:
                    stopped_early = 1.0
                    break
        ac.updates += 1
        out = {k: float(torch.stack(v).float().mean()) for k, v in stats.items()}
        out.update(lr=lr, clip_coef=self.clip_coef, grad_norm=float(torch.stack(grad_norms).mean()),
                   explained_variance=explained_variance(ret, steps[keys.VALUES], alive), kl_early_stop=stopped_early)
        return out

    def _flat_batches(self, obs: torch.Tensor,
                      actions: torch.Tensor) -> Callable[[int, int], Iterator[tuple[Minibatch, list[Minibatch], Forward]]]:
        """A memoryless model's epoch: minibatches of (time step, env) positions."""
        ac, micro = self.ac, max(1, self.ctx.gradient_accumulation_steps)

        def epoch(T: int, N: int) -> Iterator[tuple[Minibatch, list[Minibatch], Forward]]:
            for idx in minibatches(T, N, self.ctx.envs_per_env_runner, self.algo.num_minibatches, ac.device):
                parts = micro_batches(idx, micro)
                yield idx, parts, lambda i, parts=parts: ac.module.evaluate_actions(obs[parts[i]], actions[parts[i]])

        return epoch

    def _recurrent_batches(self, rollout: Rollout, obs: torch.Tensor,
                           actions: torch.Tensor) -> Callable[[int, int], Iterator[tuple[Minibatch, list[Minibatch], Forward]]]:
        """A recurrent model's epoch: minibatches of whole env columns, each unrolled over the
        rollout from the state saved at its start (``kilorl.algos.sequences``)."""
        ac, micro = self.ac, max(1, self.ctx.gradient_accumulation_steps)
        forward = rollout_forward(ac, rollout, obs, actions)

        def epoch(T: int, N: int) -> Iterator[tuple[Minibatch, list[Minibatch], Forward]]:
            for cols in column_minibatches(N, self.ctx.envs_per_env_runner, self.algo.num_minibatches, ac.device):
                col_parts = list(cols.chunk(micro))
                parts: list[Minibatch] = [flat_rows(c, T, N) for c in col_parts]
                yield torch.cat(parts), parts, lambda i, col_parts=col_parts: forward(col_parts[i])

        return epoch

    def _live_rows(self, mask: torch.Tensor) -> torch.Tensor:
        """The minibatch's live rows per rank: every rank's count summed, over the world size, so
        that the ranks' averaged gradient is the mean over all live rows, however they are split."""
        count = mask.sum()
        if self.ctx.world_size > 1:
            count = self.ac.grad_comm.sum_tensor(count.detach().cpu().reshape(1))[0].to(mask.device) / self.ctx.world_size
        return count.clamp(min=1e-8)

    def _minibatch(self, idx: Minibatch, parts: list[Minibatch], forward: Forward, old_logp: torch.Tensor,
                   old_values: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
                   stats: dict[str, list[torch.Tensor]], epoch_kl: list[torch.Tensor],
                   mask: torch.Tensor | None = None) -> None:
        """Forward/backward of one minibatch in its micro-batches ``parts`` (consecutive pieces of ``idx``);
        ``mask``: the flat batch's live rows (a multi-agent rollout), None when every row is live."""
        ac, algo = self.ac, self.algo
        # Whole-minibatch advantage statistics (over every rank's share of it): micro-batching
        # and the number of learners change memory use and communication, not the maths.
        norm = ac.normalized(advantages[idx], None if mask is None else mask[idx]) if algo.norm_adv else advantages[idx]
        live = None if mask is None else self._live_rows(mask[idx])
        offset = 0
        for i, part in enumerate(parts):
            # Only the last micro-batch's backward may communicate (DDP's no_sync contract).
            quiet = ac.grad_comm.no_sync() if i < len(parts) - 1 else contextlib.nullcontext()
            with quiet:
                with ac.autocast():
                    new_logp, entropy, new_values = forward(i)
                loss = ppo_loss(
                    new_logp, old_logp[part], norm[offset : offset + rows(part)], new_values, old_values[part],
                    returns[part], entropy,
                    clip_coef=self.clip_coef, vf_coef=algo.vf_coef, ent_coef=algo.ent_coef,
                    clip_vloss=algo.clip_vloss, norm_adv=False, mask=None if mask is None else mask[part],
                )
                # a part's share of the minibatch mean (of its live rows, with a mask)
                share = rows(part) / rows(idx) if mask is None else mask[part].sum() / live
                (loss.total * share).backward()
            offset += rows(part)
            for k, v in zip(_STATS, (loss.policy, loss.value, loss.entropy, loss.approx_kl, loss.clip_fraction)):
                stats[k].append(v.detach())
            epoch_kl.append(loss.approx_kl)
