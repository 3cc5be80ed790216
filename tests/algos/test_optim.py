"""FunctionalAdam is torch.optim.Adam without the dynamo import: same steps, same state format."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kilorl.algos.optim import FunctionalAdam


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(model: torch.nn.Module, opt, steps: int, lr_schedule: bool = True) -> None:
    gen = torch.Generator().manual_seed(7)
    for i in range(steps):
        if lr_schedule:
            opt.param_groups[0]["lr"] = 1e-2 * (1 - i / (2 * steps))
        opt.zero_grad(set_to_none=True)
        x = torch.randn(32, 5, generator=gen)
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("fused", [True, False])
def test_functional_adam_takes_the_same_steps_as_torch_adam(fused: bool) -> None:
    ours, ref = _model(0), _model(0)
    _train(ours, FunctionalAdam(list(ours.parameters()), lr=1e-2, eps=1e-5, fused=fused), 25)
    _train(ref, torch.optim.Adam(ref.parameters(), lr=1e-2, eps=1e-5, fused=fused or None, foreach=None if fused else True), 25)
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_state_dicts_load_across_functional_and_torch_adam() -> None:
    """A checkpoint written by either optimizer resumes in the other to the same parameters."""
    a, b = _model(1), _model(1)
    opt_a = torch.optim.Adam(a.parameters(), lr=1e-2, eps=1e-5, fused=True)
    _train(a, opt_a, 10, lr_schedule=False)
    b.load_state_dict(a.state_dict())
    opt_b = FunctionalAdam(list(b.parameters()), lr=1e-2, eps=1e-5)
    opt_b.load_state_dict(opt_a.state_dict())
    _train(a, opt_a, 10, lr_schedule=False)
    _train(b, opt_b, 10, lr_schedule=False)
    for x, y in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)
    back = torch.optim.Adam(a.parameters(), lr=1e-2, eps=1e-5, fused=True)
    back.load_state_dict(opt_b.state_dict())  # and the other way round
    assert float(back.state_dict()["state"][0]["step"]) == 20.0


def test_a_state_dict_for_another_model_is_refused() -> None:
    opt = FunctionalAdam(list(_model(0).parameters()), lr=1e-3)
    other = torch.optim.Adam(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="parameter"):
        opt.load_state_dict(other.state_dict())


def test_building_and_stepping_it_does_not_import_dynamo() -> None:
    code = ("import sys, torch\nfrom kilorl.algos.optim import FunctionalAdam\n"
            "m = torch.nn.Linear(4, 2)\nopt = FunctionalAdam(list(m.parameters()), lr=1e-3)\n"
            "m(torch.randn(3, 4)).sum().backward()\ntorch.nn.utils.clip_grad_norm_(m.parameters(), 0.5, foreach=True)\n"
            "opt.step()\nprint('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
