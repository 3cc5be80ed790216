"""A2C: one gradient step per rollout that moves the policy towards advantageous actions."""

from __future__ import annotations

import numpy as np
import torch

from kilorl.algos.api import RolloutBatch
from kilorl.roles.grad_comm import AllReduceComm
from kilorl.roles.learner import build_algorithm
from tests.conftest import fake_rollout, tiny_config


def make(micro: int = 1, **algo):
    cfg = tiny_config(algo={"name": "a2c", "rollout_length": 32, "anneal_lr": False, **algo},
                      train={"gradient_accumulation_steps": micro})
    return build_algorithm(cfg, AllReduceComm(1))


def test_update_raises_the_log_prob_of_positive_advantage_actions():
    torch.manual_seed(0)
    learner = make(lr=1e-2, vf_coef=0.0, norm_adv=False, gamma=0.0, gae_lambda=0.0)
    rollout = fake_rollout(0)
    steps = rollout.steps
    steps["values"][:] = 0.0
    steps["rewards"][:] = np.where(steps["actions"] == 1, 1.0, -1.0)  # action 1 is always better
    obs = torch.as_tensor(steps["obs"].reshape(-1, 4))
    before = learner.model.distribution(obs).probs[:, 1].mean().item()
    for _ in range(20):
        stats = learner.update(RolloutBatch(rollout), 128)
    after = learner.model.distribution(obs).probs[:, 1].mean().item()
    assert after > before + 0.2
    assert {"policy_loss", "value_loss", "entropy", "grad_norm", "lr"} <= set(stats)


def test_gradient_accumulation_gives_the_same_step():
    results = []
    for micro in (1, 4):
        torch.manual_seed(0)
        learner = make(micro, lr=1e-3)
        learner.update(RolloutBatch(fake_rollout(3)), 128)
        results.append(torch.cat([p.detach().reshape(-1) for p in learner.model.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)


def _recurrent(micro: int):
    cfg = tiny_config(algo={"name": "a2c", "rollout_length": 32}, train={"gradient_accumulation_steps": micro},
                      model={"recurrent": {"type": "gru", "hidden_size": 8}})
    torch.manual_seed(0)
    return build_algorithm(cfg, AllReduceComm(1))


def test_a_recurrent_model_takes_the_same_step_in_whole_column_micro_batches_as_in_one():
    rollout = fake_rollout(3)
    rollout.state = {"pi_h": np.random.default_rng(1).normal(size=(4, 1, 8)).astype(np.float32),
                     "vf_h": np.random.default_rng(2).normal(size=(4, 1, 8)).astype(np.float32)}
    one, two = _recurrent(1), _recurrent(4)
    before = {k: v.clone() for k, v in one.model.state_dict().items()}
    for learner in (one, two):
        learner.update(RolloutBatch(rollout), 128)
    for (name, a), b in zip(one.model.state_dict().items(), two.model.state_dict().values()):
        assert not torch.equal(a, before[name]), f"{name} did not train"
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
