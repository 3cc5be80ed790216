"""kiloRL's tanh: torch.tanh's values and gradients, through a faster CPU kernel on large batches."""

import torch

from kilorl.models.activations import FAST_MIN_ELEMENTS, Tanh, tanh


def test_tanh_matches_torch_within_float32_resolution_on_large_batches():
    x = torch.cat([torch.randn(512, 64) * 4, torch.linspace(-30, 30, 512 * 8).reshape(512, 8)], dim=1)
    assert x.numel() >= FAST_MIN_ELEMENTS
    exact = torch.tanh(x.double())
    assert (tanh(x).double() - exact).abs().max() < 2e-7
    assert tanh(x).abs().max() <= 1.0


def test_tanh_gradient_is_torchs():
    x = (torch.randn(128, 64) * 3).requires_grad_()
    g = torch.randn(128, 64)
    tanh(x).backward(g)
    ours = x.grad.clone()
    x.grad = None
    torch.tanh(x).backward(g)
    # d tanh = (1 - y^2) g: a forward error |dy| < 2e-7 moves it by at most 2|y||dy||g| < 4e-7 |g|
    assert ((ours - x.grad).abs() <= 4e-7 * g.abs() + 1e-9).all()
    small = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    # repeated past the fast path's size, then summed back: a 5x3 Jacobian to check numerically
    repeated = lambda t: tanh(t.repeat(1, FAST_MIN_ELEMENTS)).reshape(5, FAST_MIN_ELEMENTS, 3).sum(1)  # noqa: E731
    assert torch.autograd.gradcheck(repeated, (small,))


def test_small_and_integer_inputs_keep_torch_tanh_exactly():
    x = torch.randn(8, 64)
    assert torch.equal(tanh(x), torch.tanh(x))
    assert torch.equal(Tanh()(x), torch.tanh(x)) and not list(Tanh().state_dict())
