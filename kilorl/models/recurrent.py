"""Recurrent actor-critic: the MLP torso, then an LSTM or GRU core, then the policy and value heads.

The model's state is a dict of ``[N, num_layers, hidden_size]`` tensors, env axis first as
``Rollout.state`` keeps it: ``pi_h`` (and ``pi_c`` for an LSTM) for the policy's core, and
``vf_h`` / ``vf_c`` for the value's own core unless ``shared_backbone`` makes one core serve
both heads. A row whose ``episode_start`` is set is zeroed before the step, so the actor (one
step at a time) and the learner (a whole ``[T, B]`` sequence from the state saved at
rollout start) compute the same thing, step by step, with the same calls.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from kilorl.models.actor_critic import _layer, _mlp, as_input, sample_head

StateTensors = dict[str, torch.Tensor]
"""A recurrent model's state: name -> ``[N, num_layers, hidden_size]``."""


class RecurrentActorCritic(nn.Module):
    """Actor-critic with memory (CleanRL's ``ppo_atari_lstm.py``, SB3-contrib's ``MlpLstmPolicy``)."""

    recurrent = True
    """Marks the stateful model protocol: ``initial_state``, ``act(obs, state, episode_start)``,
    ``evaluate_sequence`` (the learner's forward over ``[T, B]``)."""

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden_sizes: list[int], *, cell: str = "lstm",
                 hidden_size: int = 128, num_layers: int = 1, activation: str = "tanh",
                 shared_backbone: bool = False, init_log_std: float = 0.0, ortho_init: bool = True) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"unsupported action space {action_space}; use Discrete or Box")
        if cell not in ("lstm", "gru"):
            raise ValueError(f"model.recurrent.type: {cell!r}; allowed: lstm, gru")
        act_dim = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        self.cell, self.hidden_size, self.num_layers = cell, hidden_size, num_layers
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        sizes = [obs_dim, *hidden_sizes]
        self.policy_torso = _mlp(sizes, activation, ortho_init)
        self.policy_rnn = rnn(hidden_sizes[-1], hidden_size, num_layers)
        self.shared = shared_backbone
        if shared_backbone:
            self.value_torso, self.value_rnn = self.policy_torso, self.policy_rnn
        else:
            self.value_torso = _mlp(sizes, activation, ortho_init)
            self.value_rnn = rnn(hidden_sizes[-1], hidden_size, num_layers)
        for core in {id(self.policy_rnn): self.policy_rnn, id(self.value_rnn): self.value_rnn}.values():
            for name, param in core.named_parameters():  # CleanRL's LSTM init: orthogonal weights, zero biases
                nn.init.zeros_(param) if "bias" in name else nn.init.orthogonal_(param, 1.0)
        self.policy_head = _layer(hidden_size, act_dim, 0.01, ortho_init)
        self.value_head = _layer(hidden_size, 1, 1.0, ortho_init)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))
            self.register_buffer("action_low", torch.tensor(np.array(action_space.low, np.float32)), persistent=False)
            self.register_buffer("action_high", torch.tensor(np.array(action_space.high, np.float32)), persistent=False)

    # ---- state ----------------------------------------------------------------------------
    @property
    def state_keys(self) -> list[str]:
        parts = ["h", "c"] if self.cell == "lstm" else ["h"]
        cores = ["pi"] if self.shared else ["pi", "vf"]
        return [f"{core}_{part}" for core in cores for part in parts]

    def initial_state(self, n: int) -> StateTensors:
        """Zeros for ``n`` fresh episodes."""
        return {k: torch.zeros(n, self.num_layers, self.hidden_size) for k in self.state_keys}

    def _core_state(self, state: StateTensors, core: str) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``[N, L, H]`` rows -> what ``nn.LSTM`` / ``nn.GRU`` take (``[L, N, H]``)."""
        h = state[f"{core}_h"].transpose(0, 1).contiguous()
        return (h, state[f"{core}_c"].transpose(0, 1).contiguous()) if self.cell == "lstm" else h

    def _unroll(self, torso: nn.Module, rnn: nn.Module, core: str, obs: torch.Tensor, starts: torch.Tensor | None,
                state: StateTensors) -> tuple[torch.Tensor, StateTensors]:
        """``[T, B, ...]`` observations through torso and core; a start zeroes its row's state first.
        Returns ``[T, B, H]`` features and, for one step (the actor's), the state after it.

        A sequence (the learner's) is cut at its episode starts into segments, each run from its
        own initial state (the saved one for a column's first segment, zeros after a start) in one
        padded call of the core (SB3-contrib's RecurrentPPO pads sequences the same way): one
        call instead of one per step, measured 8x faster for 32 steps on a 2-core CPU."""
        x = torso(obs)
        hidden = self._core_state(state, core)
        if x.shape[0] == 1:
            if starts is not None:
                keep = (1.0 - starts[0].to(x.dtype)).view(1, -1, 1)
                hidden = tuple(h * keep for h in hidden) if self.cell == "lstm" else hidden * keep
            y, hidden = rnn(x, hidden)
            parts = hidden if self.cell == "lstm" else (hidden,)
            return y, {f"{core}_{name}": p.transpose(0, 1) for name, p in zip(("h", "c"), parts)}
        return _segmented(rnn, x, starts, hidden), {}

    def _forward(self, obs: torch.Tensor, starts: torch.Tensor | None,
                 state: StateTensors) -> tuple[torch.Tensor, torch.Tensor, StateTensors]:
        """``[T, B]``: policy head output, values and the state after the last step."""
        obs = as_input(obs)
        pi, new = self._unroll(self.policy_torso, self.policy_rnn, "pi", obs, starts, state)
        if self.shared:
            vf = pi
        else:
            vf, new_vf = self._unroll(self.value_torso, self.value_rnn, "vf", obs, starts, state)
            new.update(new_vf)
        return self.policy_head(pi).float(), self.value_head(vf).squeeze(-1).float(), new

    # ---- acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, state: StateTensors, episode_start: torch.Tensor | None = None,
            deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, StateTensors]:
        """One step for ``[N, ...]`` observations: actions, log-probs, values and the next state."""
        starts = None if episode_start is None else episode_start[None]
        head, values, new = self._forward(obs[None], starts, state)
        head, values = head[0], values[0]
        actions, logp = sample_head(head, self.log_std if not self.discrete else None, deterministic)
        return actions, logp, values, new

    @torch.no_grad()
    def value(self, obs: torch.Tensor, state: StateTensors) -> torch.Tensor:
        """V of ``[K, ...]`` observations seen with ``state`` (final observations, s_T)."""
        if self.shared:
            _, values, _ = self._forward(obs[None], None, state)
        else:
            vf, _ = self._unroll(self.value_torso, self.value_rnn, "vf", as_input(obs)[None], None, state)
            values = self.value_head(vf).squeeze(-1).float()
        return values[0]

    @torch.no_grad()
    def advance(self, obs: torch.Tensor, episode_start: torch.Tensor, state: StateTensors,
                active: torch.Tensor | None = None) -> StateTensors:
        """The state after ``[t, B, ...]`` observations, stepped one at a time as the actor steps
        them (a start zeroes its row first); where ``active[i]`` (``[t, B]`` bool) is false a row
        keeps its state through step ``i``. The learner's chunks get their stored states and
        their burn-in from it: never differentiated."""
        x = as_input(obs)
        for i in range(x.shape[0]):
            _, new = self._unroll(self.policy_torso, self.policy_rnn, "pi", x[i : i + 1], episode_start[i : i + 1],
                                  state)
            if not self.shared:
                new.update(self._unroll(self.value_torso, self.value_rnn, "vf", x[i : i + 1],
                                        episode_start[i : i + 1], state)[1])
            if active is not None:
                keep = active[i].view(-1, 1, 1)
                new = {k: torch.where(keep, v, state[k]) for k, v in new.items()}
            state = new
        return state

    def evaluate_sequence(self, obs: torch.Tensor, actions: torch.Tensor, episode_start: torch.Tensor,
                          state: StateTensors) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The learner's forward: ``[T, B]`` log-probs, entropies and values of whole env columns,
        unrolled from ``state`` (``[B, ...]``, the state at rollout start)."""
        head, values, _ = self._forward(obs, episode_start, state)
        if self.discrete:
            logp_all = head.log_softmax(-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            dist = Normal(head, self.log_std.float().exp().expand_as(head))
            logp, entropy = dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)
        return logp, entropy, values

    def to_env_action(self, actions: torch.Tensor) -> np.ndarray:
        """Discrete actions as ints; Gaussian actions clipped into the Box bounds."""
        if self.discrete:
            return actions.numpy().astype(np.int64)
        return torch.clamp(actions, self.action_low, self.action_high).numpy()


def _segmented(rnn: nn.Module, x: torch.Tensor, starts: torch.Tensor | None,
               hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``[T, B, F]`` through ``rnn`` with the state zeroed where ``starts`` (``[T, B]``) is set:
    the columns cut into segments at their starts, padded to the longest, one call."""
    T, B = x.shape[:2]
    begins = torch.zeros(T, B, dtype=torch.bool, device=x.device) if starts is None else starts.bool().clone()
    fresh = begins[0].clone()  # a column whose first step is a start begins from zeros too
    begins[0] = True
    flat = begins.t().reshape(-1)  # column-major: a column's steps are consecutive
    segment = torch.cumsum(flat.long(), 0) - 1
    index = torch.arange(B * T, device=x.device)
    first = torch.cummax(torch.where(flat, index, torch.zeros_like(index)), 0).values
    pos = index - first
    S, L = int(segment[-1]) + 1, int(pos.max()) + 1
    padded = x.new_zeros(L, S, x.shape[-1])
    padded[pos, segment] = x.transpose(0, 1).reshape(B * T, -1)
    column_first = segment.view(B, T)[:, 0]  # each column's first segment takes the saved state
    keep = (~fresh).to(x.dtype).view(1, -1, 1)

    def initial(h: torch.Tensor) -> torch.Tensor:
        out = h.new_zeros(h.shape[0], S, h.shape[-1])
        out[:, column_first] = h * keep
        return out

    h0 = tuple(initial(h) for h in hidden) if isinstance(hidden, tuple) else initial(hidden)
    y, _ = rnn(padded, h0)
    return y[pos, segment].view(B, T, -1).transpose(0, 1)
