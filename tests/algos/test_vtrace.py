"""V-trace against the reference recursion, and its on-policy special case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import vtrace as vtrace_module
from kilorl.algos.vtrace import vtrace


def _reference(blogp, tlogp, r, v, v_next, term, done, gamma, rho_bar, c_bar, lam):
    """The paper's recursion, one step at a time (float64)."""
    T, N = r.shape
    ratio = np.exp(tlogp - blogp)
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    vs = np.zeros((T, N))
    nxt = v_next * (1 - term)
    acc = np.zeros(N)
    for t in range(T - 1, -1, -1):
        delta = rho[t] * (r[t] + gamma * nxt[t] - v[t])
        acc = delta + gamma * c[t] * (1 - done[t]) * acc
        vs[t] = v[t] + acc
    vs_next = np.where(done.astype(bool), nxt, np.concatenate([vs[1:], v_next[-1:]]))
    return vs, rho * (r + gamma * vs_next - v)


def _inputs(T, N, seed, p_done=0.1):
    rng = np.random.default_rng(seed)
    blogp = rng.normal(-0.7, 0.3, (T, N))
    tlogp = blogp + rng.normal(0, 0.5, (T, N))  # ratios on both sides of 1
    done = rng.random((T, N)) < p_done
    term = done & (rng.random((T, N)) < 0.5)
    return blogp, tlogp, rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N)), term, done


@pytest.mark.parametrize(("T", "N"), [(1, 1), (5, 3), (32, 8), (128, 2)])
@pytest.mark.parametrize(("rho_bar", "c_bar"), [(1.0, 1.0), (100.0, 100.0), (0.5, 2.0)])
@pytest.mark.parametrize("loop", [False, True])
def test_vtrace_equals_the_reference_recursion(T, N, rho_bar, c_bar, loop, monkeypatch):
    if loop:
        monkeypatch.setattr(vtrace_module, "MAX_MATRIX", 0)  # the loop over time the closed form hands over to
    args = _inputs(T, N, seed=T * 31 + N)
    want_vs, want_pg = _reference(*args, gamma=0.97, rho_bar=rho_bar, c_bar=c_bar, lam=0.95)
    t = [torch.tensor(x, dtype=torch.float32) for x in args]
    got = vtrace(*t, gamma=0.97, rho_bar=rho_bar, c_bar=c_bar, lam=0.95)
    np.testing.assert_allclose(got.vs.numpy(), want_vs, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_pg, atol=1e-5, rtol=1e-5)


def test_with_the_behaviour_policy_as_target_vtrace_gives_bootstrapped_n_step_returns():
    T, N, gamma = 6, 2, 0.9
    rng = np.random.default_rng(0)
    logp = torch.tensor(rng.normal(size=(T, N)), dtype=torch.float32)
    r, v = torch.tensor(rng.normal(size=(T, N)), dtype=torch.float32), torch.tensor(rng.normal(size=(T, N)), dtype=torch.float32)
    v_next = torch.cat([v[1:], torch.tensor([[0.3, -0.2]])])
    none = torch.zeros(T, N)
    got = vtrace(logp, logp, r, v, v_next, none, none, gamma)
    ret = torch.tensor([0.3, -0.2])  # V(s_T)
    for t in range(T - 1, -1, -1):
        ret = r[t] + gamma * ret
        torch.testing.assert_close(got.vs[t], ret, rtol=1e-5, atol=1e-5)
