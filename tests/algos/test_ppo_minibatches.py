"""PPO's minibatches: index sets over the flat batch, the whole batch as a view when there is one."""

import numpy as np
import pytest
import torch

from kilorl.algos.api import RolloutBatch
from kilorl.algos.ppo import learner as ppo_learner
from kilorl.algos.ppo.learner import micro_batches, minibatches, rows
from kilorl.roles.grad_comm import make_grad_comm
from kilorl.roles.learner import build_algorithm
from tests.conftest import fake_rollout, tiny_config


def test_one_minibatch_is_the_whole_batch_without_a_permutation():
    state = torch.get_rng_state()
    assert minibatches(32, 4, 4, 1, torch.device("cpu")) == [slice(0, 128)]
    assert torch.equal(torch.get_rng_state(), state)  # no permutation drawn
    several = minibatches(32, 4, 4, 4, torch.device("cpu"))
    assert sorted(torch.cat(several).tolist()) == list(range(128)) and [rows(m) for m in several] == [32] * 4


@pytest.mark.parametrize(("size", "parts"), [(128, 4), (10, 3), (7, 7), (5, 8)])
def test_micro_batches_of_a_slice_cover_it_in_torch_chunks_sizes(size, parts):
    pieces = micro_batches(slice(0, size), parts)
    chunks = torch.arange(size).chunk(parts)
    assert [rows(p) for p in pieces] == [len(c) for c in chunks]
    assert [i for p in pieces for i in range(p.start, p.stop)] == list(range(size))


def _updated(cfg, monkeypatch=None, permuted: bool = False) -> dict[str, np.ndarray]:
    if permuted:  # the same single minibatch as a shuffled index tensor (the path before the slice)
        monkeypatch.setattr(ppo_learner, "minibatches", lambda T, N, *_: [torch.randperm(T * N)])
    torch.manual_seed(0)
    learner = build_algorithm(cfg, make_grad_comm(cfg, 1))
    learner.update(RolloutBatch(fake_rollout(seed=1)), 1024)
    return {k: v.detach().numpy().copy() for k, v in learner.model.state_dict().items()}


def test_the_whole_batch_in_order_takes_the_step_a_shuffled_whole_batch_takes(monkeypatch):
    cfg = tiny_config(algo={"num_minibatches": 1, "update_epochs": 3, "rollout_length": 32},
                      train={"gradient_accumulation_steps": 2})
    in_order, shuffled = _updated(cfg), _updated(cfg, monkeypatch, permuted=True)
    torch.manual_seed(0)
    untrained = build_algorithm(cfg, make_grad_comm(cfg, 1)).model.state_dict()
    for name, value in in_order.items():
        assert not np.allclose(value, untrained[name].numpy()), name
        np.testing.assert_allclose(value, shuffled[name], rtol=1e-4, atol=1e-6, err_msg=name)
