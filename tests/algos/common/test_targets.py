"""Hard and Polyak target updates against values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from kilorl.algos.common.targets import TargetUpdater, hard_update, soft_update


def _pair(online_value: float, target_value: float) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    online, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        for p in online.parameters():
            p.fill_(online_value)
        for p in target.parameters():
            p.fill_(target_value)
    return online, target


def test_a_hard_update_copies_the_online_network():
    online, target = _pair(3.0, -1.0)
    hard_update(target, online)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters()))


def test_a_polyak_update_moves_the_target_by_tau_of_the_gap():
    online, target = _pair(1.0, 0.0)
    soft_update(target, online, 0.1)  # 0.1 * 1 + 0.9 * 0
    assert torch.allclose(target.weight, torch.full((1, 2), 0.1))
    soft_update(target, online, 0.1)  # 0.1 * 1 + 0.9 * 0.1 = 0.19
    assert torch.allclose(target.bias, torch.tensor([0.19]))


@pytest.mark.parametrize("tau", [0.0, 1.5])
def test_tau_outside_zero_to_one_is_refused(tau):
    online, target = _pair(1.0, 0.0)
    with pytest.raises(ValueError, match="tau"):
        soft_update(target, online, tau)


def test_updates_come_once_per_interval_and_crossed_intervals_compose():
    online, target = _pair(1.0, 0.0)
    updater = TargetUpdater(interval=10, tau=0.5)
    assert updater.maybe_update(target, online, 9) == 0 and torch.all(target.weight == 0)
    assert updater.maybe_update(target, online, 10) == 1
    assert torch.allclose(target.weight, torch.full((1, 2), 0.5))
    assert updater.maybe_update(target, online, 15) == 0  # still inside the second interval
    assert updater.maybe_update(target, online, 40) == 3  # three at once: 1 - 0.5^3 of the gap 0.5
    assert torch.allclose(target.weight, torch.full((1, 2), 0.5 + 0.875 * 0.5))


def test_named_modules_and_optimizers_round_trip_through_the_checkpoint_files(tmp_path):
    """Two modules and two optimizers (as SAC will have) survive checkpoint_files -> disk -> load."""
    from kilorl.algos.common.checkpointing import NamedParts
    from kilorl.algos.common.optimizer_step import OptimizerStep
    from kilorl.roles.checkpoint_format import checkpoint_files
    from kilorl.roles.grad_comm import AllReduceComm
    from kilorl.trainer.checkpoint import load_checkpoint, write_checkpoint

    def parts():
        torch.manual_seed(0)
        actor, critic = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
        named = NamedParts()
        named.module("actor", actor), named.module("critic", critic)
        opts = [named.optimizer(n, OptimizerStep(m, AllReduceComm(1), 1e-2, None)) for n, m in (("pi", actor), ("q", critic))]
        return named, actor, critic, opts

    named, actor, critic, opts = parts()
    for module, opt in zip((actor, critic), opts):
        opt.zero_grad()
        module(torch.ones(4, 3)).sum().backward()
        opt.step()
    tensors, meta = named.state()
    state = {"model": actor.state_dict(), "optimizer": opts[0].state_dict(), "obs_rms": {}, "ret_rms": {},
             "updates": 1, "torch_rng": torch.get_rng_state(), "tensors": tensors, "extra_meta": meta}
    path = write_checkpoint(tmp_path, checkpoint_files(state), {"env_steps": 1})
    loaded, _ = load_checkpoint(path)
    again, actor2, critic2, opts2 = parts()
    again.load(loaded["tensors"], loaded["extra_meta"])
    assert torch.equal(critic2.weight, critic.weight) and torch.equal(actor2.bias, actor.bias)
    for a, b in zip(opts, opts2):
        sa, sb = a.state_dict()["state"], b.state_dict()["state"]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"]) for i in sa)
