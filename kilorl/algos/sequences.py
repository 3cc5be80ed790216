"""Minibatches of whole env columns, or of chunks of them, for a recurrent model (CleanRL's
``ppo_atari_lstm.py``), shared by the actor-critic methods (PPO's minibatches, A2C's micro-batches).

A recurrent model is trained on env columns unrolled over the rollout's ``T`` steps from the
state saved at rollout start (``Rollout.state``), a column's episode starts zeroing its state
inside the sequence, exactly as the actor did step by step. So on the first minibatch of the
first epoch the learner's log-probs and values are the actor's, and the ratio is 1.

PPO's ``algo.sequence_mode: chunks`` (R2D2's stored states and burn-in on an on-policy rollout)
trains fixed-length chunks instead. A chunk is a window of one env column: ``burn_in`` steps
that only refresh the state (no loss, no gradient), then ``stride = sequence_length - burn_in``
steps that carry the loss. Chunk ``k`` of a column trains steps ``[k * stride, (k + 1) * stride)``;
its burn-in is the ``burn_in`` steps before them, which chunk ``k - 1`` trains, so every step
carries the loss exactly once and a gradient flows through at most ``stride`` steps (the
truncated BPTT length). A chunk past the rollout's end is padded and its padded steps masked
out; an episode start inside a chunk zeroes the state there, as the actor did. Each chunk
starts from its stored state, the state at its first step (burn-in included), replayed once
per update from ``Rollout.state`` with the parameters the update starts from, step by step as
the actor stepped: when the learner trains the version the actor acted with, those are the
actor's own states, so the first minibatch reproduces the actor's log-probs (ratio 1); later
epochs keep the stored states and burn-in refreshes them with the current parameters
(Kapturowski et al., 2019).
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
    from kilorl.models.recurrent import StateTensors


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


def chunks_per_column(T: int, sequence_length: int, burn_in: int) -> int:
    """How many chunks cut a ``T``-step column (the last one padded)."""
    return -(-T // (sequence_length - burn_in))


def chunk_minibatches(N: int, K: int, envs_per_actor: int, num_minibatches: int,
                      device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch's minibatches as ``(columns, chunk indices)`` pairs of ``[B]`` tensors.

    Drawn over (env within an actor's block, chunk) positions, a minibatch takes the same
    positions from every actor's block of ``envs_per_actor`` columns, so the ranks' shares
    are together one learner's minibatch (1 and K learners take the same steps)."""
    block = envs_per_actor if envs_per_actor > 0 and N % envs_per_actor == 0 else N
    blocks = torch.arange(0, N, block, device=device)
    positions = block * K
    perm = torch.arange(positions, device=device) if num_minibatches == 1 else torch.randperm(positions, device=device)
    per = max(1, positions // num_minibatches)
    out = []
    for s in range(0, positions, per):
        p = perm[s : s + per]
        columns = (p[:, None] // K + blocks[None, :]).reshape(-1)
        out.append((columns, (p % K)[:, None].expand(-1, len(blocks)).reshape(-1)))
    return out


def stored_states(model: torch.nn.Module, obs: torch.Tensor, starts: torch.Tensor, state: StateTensors,
                  stride: int, burn_in: int, K: int) -> StateTensors:
    """``[K, N, ...]``: every chunk's state before its first step (``max(0, k * stride - burn_in)``),
    stepped from ``state`` (``Rollout.state``) over the ``[T, N]`` rollout."""
    kept: dict[str, list[torch.Tensor]] = {k: [] for k in state}
    t, current = 0, state
    for k in range(K):
        begin = max(0, k * stride - burn_in)
        if begin > t:
            current = model.advance(obs[t:begin], starts[t:begin], current)
            t = begin
        for name, value in current.items():
            kept[name].append(value)
    return {name: torch.stack(values) for name, values in kept.items()}


def chunk_forward(model: torch.nn.Module, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor,
                  stored: StateTensors, stride: int,
                  burn_in: int) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]:
    """The forward over a set of chunks ``(columns, ks)``: log-probs, entropies and values of
    their trained steps, flat in ``chunk_rows`` order. ``obs``/``actions``/``starts`` are
    ``[T, N, ...]``, ``stored`` is ``stored_states``'s ``[K, N, ...]``."""
    T = obs.shape[0]

    def forward(columns: torch.Tensor, ks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = {name: value[ks, columns] for name, value in stored.items()}
        first = ks * stride
        if burn_in:  # steps first - burn_in .. first - 1, those before the rollout skipped
            times = first[None, :] - burn_in + torch.arange(burn_in, device=first.device)[:, None]
            at = times.clamp(min=0)
            state = model.advance(obs[at, columns], starts[at, columns], state, active=times >= 0)
        times = first[None, :] + torch.arange(stride, device=first.device)[:, None]
        valid = times < T
        at = times.clamp(max=T - 1)  # padding after the column's end: never read before a real step
        logp, entropy, values = model.evaluate_sequence(obs[at, columns], actions[at, columns],
                                                        starts[at, columns], state)
        return logp[valid], entropy[valid], values[valid]

    return forward


def chunk_rows(columns: torch.Tensor, ks: torch.Tensor, T: int, N: int, stride: int) -> torch.Tensor:
    """Rows of the flat ``[T * N]`` batch that chunks ``(columns, ks)`` train, in the order
    ``chunk_forward`` returns them."""
    times = ks[None, :] * stride + torch.arange(stride, device=ks.device)[:, None]
    return (times * N + columns[None, :])[times < T]
