"""Minibatches of whole env columns for a recurrent model (CleanRL's ``ppo_atari_lstm.py``),
shared by the actor-critic methods (PPO's minibatches, A2C's micro-batches).

A recurrent model is trained on env columns unrolled over the rollout's ``T`` steps from the
state saved at rollout start (``Rollout.state``), a column's episode starts zeroing its state
inside the sequence, exactly as the actor did step by step. So on the first minibatch of the
first epoch the learner's log-probs and values are the actor's, and the ratio is 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.core import Rollout

if TYPE_CHECKING:
    from kilorl.algos.actor_critic import ActorCriticState


def episode_starts(rollout: Rollout) -> np.ndarray:
    """``[T, N]`` float32: 1 where step ``t`` is the first of an episode that began inside the
    rollout (the step after a termination or truncation). Row 0 is 0: the actor already reset
    the state of an episode that began at the rollout's first step, so the saved state is its
    start (zero) and needs no reset."""
    steps = rollout.steps
    done = np.logical_or(steps[keys.TERMINATED], steps[keys.TRUNCATED])
    starts = np.zeros(done.shape, np.float32)
    starts[1:] = done[:-1]
    return starts


def column_minibatches(N: int, envs_per_actor: int, num_minibatches: int, device: torch.device) -> list[torch.Tensor]:
    """One epoch's minibatches as env column indices into ``[T, N]``.

    Drawn over env positions within an actor's block, a minibatch takes the same positions
    from every actor's block of ``envs_per_actor`` columns: a rank holding some of the actors
    draws the same positions (same seed), so the ranks' minibatches together are one
    learner's minibatch (1 and K learners take the same steps)."""
    block = envs_per_actor if envs_per_actor > 0 and N % envs_per_actor == 0 else N
    blocks = torch.arange(0, N, block, device=device)
    if num_minibatches == 1:
        return [torch.arange(N, device=device)]
    perm = torch.randperm(block, device=device)
    per = max(1, block // num_minibatches)
    return [(perm[s : s + per, None] + blocks[None, :]).reshape(-1) for s in range(0, block, per)]


def flat_rows(columns: torch.Tensor, T: int, N: int) -> torch.Tensor:
    """Rows of the flat ``[T * N]`` batch of ``columns``, in ``[T, B]`` order (what reshaping the
    sequence forward's ``[T, B]`` outputs gives)."""
    return (torch.arange(T, device=columns.device)[:, None] * N + columns[None, :]).reshape(-1)


def sequence_forward(module: torch.nn.Module, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor,
                     state: dict[str, torch.Tensor]) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """The forward over a set of columns: ``[T * B]`` log-probs, entropies and values, flat in
    ``flat_rows`` order. ``obs``/``actions``/``starts`` are ``[T, N, ...]``, ``state`` ``[N, ...]``."""

    def forward(columns: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logp, entropy, values = module.evaluate_sequence(
            obs[:, columns], actions[:, columns], starts[:, columns], {k: v[columns] for k, v in state.items()})
        return logp.reshape(-1), entropy.reshape(-1), values.reshape(-1)

    return forward


def rollout_forward(ac: ActorCriticState, rollout: Rollout, obs: torch.Tensor,
                    actions: torch.Tensor) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """``sequence_forward`` of a learner's recurrent model over ``rollout`` (flat ``[T * N]`` ``obs``
    and ``actions`` as the learner holds them), from ``Rollout.state`` with the rollout's episode starts."""
    T, N = rollout.shape
    if not rollout.state:
        raise ValueError("a recurrent model's rollout has no Rollout.state (the policy state at rollout start)")
    starts = torch.as_tensor(episode_starts(rollout), device=ac.device)
    state = {k: torch.tensor(v, device=ac.device) for k, v in rollout.state.items()}  # a copy: Ray's views are read-only
    return sequence_forward(ac.module, obs.view(T, N, *obs.shape[1:]), actions.view(T, N, *actions.shape[1:]),
                            starts, state)
