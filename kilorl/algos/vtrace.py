"""V-trace targets (Espeholt et al., 2018), vectorised over time on the learner's device.

``v_s - V(x_s) = delta_s + gamma * c_s * (1 - done_s) * (v_{s+1} - V(x_{s+1}))`` with
``delta_s = rho_s * (r_s + gamma * V_next_s - V(x_s))``, ``rho_s = min(rho_bar, pi/mu)`` and
``c_s = lambda * min(c_bar, pi/mu)``. ``V_next_s`` is the value of the observation after step
``s``: the next row's, the real final observation's where an episode ended (0 after a
termination), V(s_T) after the last row. The recursion is solved in closed form, as a
``[T, T]`` matrix of discount products per env built from a cumulative sum of logs
(float64), so there is no Python loop over time; beyond ``MAX_MATRIX`` entries a loop over
time on the device takes over (memory, not speed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_MATRIX = 1 << 24
"""``T * T * N`` above which the closed form's matrix is not built."""
_TINY = 1e-30
"""A zero discount product (an episode end) in log space: exp(log(1e-30) + ...) is 0 to float32."""


@dataclass
class VTrace:
    vs: torch.Tensor
    """``[T, N]`` value targets."""
    pg_advantages: torch.Tensor
    """``[T, N]``: ``rho_pg * (r + gamma * v_next - V)``, with ``v_next`` the next state's target."""


def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
           next_values: torch.Tensor, terminated: torch.Tensor, done: torch.Tensor, gamma: float,
           rho_bar: float = 1.0, c_bar: float = 1.0, lam: float = 1.0, pg_rho_bar: float | None = None) -> VTrace:
    """All inputs ``[T, N]``: ``next_values`` is V of the observation after each step (see the
    module docstring), ``terminated`` and ``done`` (terminated or truncated) as floats or bools."""
    with torch.no_grad():
        ratio = (target_logp - behaviour_logp).exp()
        rho = ratio.clamp(max=rho_bar)
        c = lam * ratio.clamp(max=c_bar)
        term, done = terminated.float(), done.float()
        v_next = next_values * (1.0 - term)  # a termination's next value is 0
        delta = rho * (rewards + gamma * v_next - values)
        a = gamma * c * (1.0 - done)
        acc = _discounted_sums(delta, a)
        vs = values + acc
        # the next state's target: the next row's v_s within an episode, else V_next itself
        vs_next = torch.cat([vs[1:], next_values[-1:]], dim=0)
        vs_next = torch.where(done.bool(), v_next, vs_next * (1.0 - term))
        pg_rho = ratio.clamp(max=rho_bar if pg_rho_bar is None else pg_rho_bar)
        return VTrace(vs=vs, pg_advantages=pg_rho * (rewards + gamma * vs_next - values))


def _discounted_sums(delta: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``acc_t = delta_t + a_t * acc_{t+1}`` (``acc_T = 0``) for ``[T, N]`` inputs."""
    T, N = delta.shape
    if T * T * N > MAX_MATRIX:
        acc = torch.zeros_like(delta)
        run = torch.zeros_like(delta[0])
        for t in range(T - 1, -1, -1):
            run = delta[t] + a[t] * run
            acc[t] = run
        return acc
    log_a = a.double().clamp(min=_TINY).log()
    prefix = torch.cat([torch.zeros(1, N, dtype=torch.float64, device=a.device), log_a.cumsum(0)], dim=0)  # [T+1, N]
    # product of a_j for j in [t, k) = exp(prefix[k] - prefix[t]), for k >= t
    span = prefix[None, :T, :] - prefix[:T, None, :]  # [t, k, N]: log of the product over [t, k)
    upper = torch.ones(T, T, dtype=torch.bool, device=a.device).triu()[:, :, None]
    weights = torch.where(upper, span, -torch.inf).exp()  # k < t: no term
    return torch.einsum("tkn,kn->tn", weights, delta.double()).to(delta.dtype)
