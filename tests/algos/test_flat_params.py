"""Flat parameters: views of one buffer each for data and gradients, stepped and clipped in one call."""

from __future__ import annotations

import pytest
import torch

from kilorl.algos.flat_params import FlatParameters
from kilorl.algos.optim import FunctionalAdam
from tests.algos.test_optim import _model, _train


def test_parameters_and_gradients_are_views_that_backward_fills_in_place():
    model = _model(0)
    before = [p.detach().clone() for p in model.parameters()]
    flat = FlatParameters(list(model.parameters()))
    for p, b, g in zip(model.parameters(), before, flat.views(flat.grad)):
        assert torch.equal(p, b) and p.data_ptr() != b.data_ptr()  # the values moved into the buffer
        assert p.grad is not None and p.grad.data_ptr() == g.data_ptr()
    assert flat.data.numel() == sum(b.numel() for b in before)
    model(torch.randn(8, 5)).pow(2).mean().backward()
    assert flat.grad.abs().sum() > 0  # autograd accumulated into the views
    assert all(p.grad.data_ptr() == g.data_ptr() for p, g in zip(model.parameters(), flat.views(flat.grad)))
    flat.zero_grad()
    assert flat.grad.abs().sum() == 0


@pytest.mark.parametrize("fused", [True, False])
def test_flat_adam_takes_the_same_steps_as_torch_adam_and_shares_its_state_format(fused: bool):
    ours, ref = _model(0), _model(0)
    opt = FunctionalAdam(list(ours.parameters()), lr=1e-2, eps=1e-5, fused=fused,
                         flat=FlatParameters(list(ours.parameters())))
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, eps=1e-5)
    _train(ours, opt, 25)
    _train(ref, torch_opt, 25)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # torch's state resumes in a flat optimizer (into its views), and the two go on alike
    resumed = _model(1)
    resumed.load_state_dict(ref.state_dict())
    flat_opt = FunctionalAdam(list(resumed.parameters()), lr=1e-2, eps=1e-5, flat=FlatParameters(list(resumed.parameters())))
    flat_opt.load_state_dict(torch_opt.state_dict())
    assert {float(s["step"]) for s in flat_opt.state_dict()["state"].values()} == {25.0}
    _train(resumed, flat_opt, 5, lr_schedule=False)
    _train(ref, torch_opt, 5, lr_schedule=False)
    for a, b in zip(resumed.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_clipping_gathers_gradients_that_left_their_views_and_clips_as_torch_does():
    ours, ref = _model(0), _model(0)
    flat = FlatParameters(list(ours.parameters()))
    x = torch.randn(16, 5)
    for p in ours.parameters():
        p.grad = None  # what torch.optim's zero_grad(set_to_none=True) does
    ours(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    norm = flat.clip_grad_norm_(0.1)
    ref_norm = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.1)
    torch.testing.assert_close(norm, ref_norm)
    assert norm > 0.1  # the clip did something
    for p, r, g in zip(ours.parameters(), ref.parameters(), flat.views(flat.grad)):
        assert p.grad is not None and p.grad.data_ptr() == g.data_ptr()
        torch.testing.assert_close(p.grad, r.grad)


def test_mixed_devices_or_dtypes_are_refused():
    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))]
    with pytest.raises(ValueError, match="one device and dtype"):
        FlatParameters(params)
    model = _model(0)
    with pytest.raises(ValueError, match="in order"):
        FunctionalAdam(list(model.parameters())[::-1], lr=1e-3, flat=FlatParameters(list(model.parameters())))


def test_a_torch_optimizer_over_flat_parameters_steps_as_over_plain_ones():
    """A2C's RMSprop sets gradients to None; clipping gathers them back each step."""
    ours, ref = _model(0), _model(0)
    flat = FlatParameters(list(ours.parameters()))
    opts = [torch.optim.RMSprop(m.parameters(), lr=1e-2, alpha=0.99, eps=1e-5) for m in (ours, ref)]
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        x = torch.randn(16, 5, generator=gen)
        for model, opt, clip in ((ours, opts[0], lambda: flat.clip_grad_norm_(0.5)),
                                 (ref, opts[1], lambda: torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.5))):
            opt.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            clip()
            opt.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert not torch.equal(a, _model(0).state_dict()[next(k for k, v in ref.named_parameters() if v is b)])
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
