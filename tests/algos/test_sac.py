"""SAC's parts against hand-computed values: the entropy target, the twin minimum, the tanh
log-prob correction, the Polyak update; its gradient-step accounting, the policy-only
published layout, and a checkpoint that resumes the update exactly."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.algos.api import LearnerContext
from kilorl.algos.common.targets import soft_update
from kilorl.algos.sac.config import SACConfig
from kilorl.algos.sac.learner import SACLearner, default_target_entropy, min_of_random_subset
from kilorl.algos.sac.model import QEnsemble, build_sac_actor, squashed_log_prob, tanh_log_det
from kilorl.config import ModelConfig
from kilorl.core import Rollout
from kilorl.roles.grad_comm import AllReduceComm


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Networks this small lose more to handing work between threads than they gain: on the
    loaded 2-core machine the restore test took 43 s with torch's 2 threads, 4 s with one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
BOUNDED = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def test_the_entropy_target_is_minus_the_action_dimensions():
    assert default_target_entropy(ACT) == -2.0
    assert default_target_entropy(gym.spaces.Box(-1, 1, (6,))) == -6.0
    assert _learner(SACConfig()).target_entropy == -2.0
    assert _learner(SACConfig(target_entropy=-0.5)).target_entropy == -0.5


def test_the_target_takes_the_minimum_of_the_twin_critics_or_of_a_random_subset():
    q = torch.tensor([[1.0, 5.0, -2.0], [3.0, 2.0, -1.0]])
    torch.testing.assert_close(min_of_random_subset(q, 2), torch.tensor([1.0, 2.0, -2.0]))
    ensemble = torch.tensor([[0.0, 9.0], [1.0, 8.0], [2.0, 7.0], [3.0, 6.0]])
    g = torch.Generator().manual_seed(4)
    rows = torch.randperm(4, generator=g)[:2]
    expected = ensemble[rows].min(0).values
    picked = min_of_random_subset(ensemble, 2, torch.Generator().manual_seed(4))
    torch.testing.assert_close(picked, expected)
    torch.testing.assert_close(expected, torch.tensor([float(min(rows)), 9.0 - float(max(rows))]))


def test_the_squashed_log_prob_subtracts_the_tanh_jacobian():
    mean, log_std, u = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, math.log(0.5)]]), torch.tensor([[0.5, -1.0]])
    gaussian = (-0.5 * 0.5 ** 2 - 0.5 * math.log(2 * math.pi)) + (-0.5 * 4.0 ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi))
    jacobian = math.log(1 - math.tanh(0.5) ** 2) + math.log(1 - math.tanh(-1.0) ** 2)
    assert float(squashed_log_prob(mean, log_std, u)) == pytest.approx(gaussian - jacobian, rel=1e-6)
    # torch's own change of variables agrees
    dist = torch.distributions.TransformedDistribution(torch.distributions.Normal(mean, log_std.exp()),
                                                       [torch.distributions.TanhTransform()])
    torch.testing.assert_close(squashed_log_prob(mean, log_std, u), dist.log_prob(torch.tanh(u)).sum(-1))
    # stable where tanh saturates: log(1 - tanh(u)^2) -> log 4 - 2|u|, not log(1e-6)
    assert float(tanh_log_det(torch.tensor([[30.0]]))) == pytest.approx(math.log(4.0) - 60.0)


def test_a_polyak_update_moves_the_target_tau_of_the_way():
    online, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    for p in online.parameters():
        torch.nn.init.constant_(p, 1.0)
    for p in target.parameters():
        torch.nn.init.constant_(p, 0.0)
    soft_update(target, online, 0.005)
    torch.testing.assert_close(target.weight, torch.full((1, 2), 0.005))
    soft_update(target, online, 0.005)
    torch.testing.assert_close(target.bias, torch.full((1,), 1 - 0.995 ** 2))


def test_actions_in_minus_one_to_one_map_onto_the_envs_bounds():
    actor = build_sac_actor(OBS, BOUNDED, ModelConfig())
    np.testing.assert_allclose(actor.to_env_action(torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])),
                               [[-2.0, 0.0], [2.0, 1.0], [0.0, 0.5]])
    with pytest.raises(ValueError, match="Box action space"):
        build_sac_actor(OBS, gym.spaces.Discrete(3), ModelConfig())


def test_the_ensemble_evaluates_each_critic_on_the_same_inputs():
    q = QEnsemble(3, 2, [8], "relu", num_qs=4, layer_norm=True)
    obs, act = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    out = q(obs, act)
    assert out.shape == (4, 5)
    assert not torch.allclose(out[0], out[1])  # independently initialised members


def test_bad_ensemble_and_parallelism_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="num_min_qs=3 exceeds num_qs=2"):
        SACConfig(num_min_qs=3)
    with pytest.raises(ValueError, match="parallelism.learner=2"):
        SACConfig().check_parallelism(type("P", (), {"learner": 2})())


# ---- the learner ---------------------------------------------------------------------------
def _learner(cfg: SACConfig, seed: int = 1) -> SACLearner:
    torch.manual_seed(seed)
    ctx = LearnerContext(OBS, ACT, AllReduceComm(1), lambda: build_sac_actor(OBS, ACT, ModelConfig(hidden_sizes=[16])),
                         seed=seed)
    return SACLearner(cfg, ctx)


def _rollout(seed: int, T: int = 16, N: int = 2) -> Rollout:
    rng = np.random.default_rng(seed)
    steps = {keys.OBS: rng.uniform(-1, 1, (T, N, 3)).astype(np.float32),
             keys.ACTIONS: rng.uniform(-1, 1, (T, N, 2)).astype(np.float32),
             keys.REWARDS: rng.normal(size=(T, N)).astype(np.float32),
             keys.TERMINATED: rng.random((T, N)) < 0.1, keys.TRUNCATED: np.zeros((T, N), bool)}
    final = {keys.FINAL_T: np.zeros(0, np.int64), keys.FINAL_ENV: np.zeros(0, np.int64), keys.OBS: np.zeros((0, 3), np.float32)}
    return Rollout(steps, last={keys.OBS: rng.uniform(-1, 1, (N, 3)).astype(np.float32)}, final=final)


def test_gradient_steps_follow_the_utd_ratio_and_policy_steps_the_delay():
    learner = _learner(SACConfig(learning_starts=32, utd_ratio=2.5, policy_delay=2, batch_size=8))
    table = learner.make_replay_table()
    table.add(_rollout(0))
    assert learner.update(table, 32) == {"gradient_steps": 0.0}  # learning_starts not yet passed
    before = [p.detach().clone() for p in learner.critic_target.parameters()]
    table.add(_rollout(1))
    stats = learner.update(table, 64)
    assert stats["gradient_steps"] == 80.0 and learner.updates == 80  # 32 new env steps x 2.5
    assert set(stats) >= {"critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean"}
    assert all(not torch.equal(a, b) for a, b in zip(before, learner.critic_target.parameters()))
    assert stats["alpha"] != 1.0  # the temperature was tuned
    table.add(_rollout(2, T=1, N=1))
    assert learner.update(table, 65)["gradient_steps"] == 2.0  # 2.5 owed: 2 now, 0.5 carried
    assert learner.update(table, 66)["gradient_steps"] == 3.0


def test_a_fixed_alpha_is_never_tuned():
    learner = _learner(SACConfig(learning_starts=0, alpha=0.2, batch_size=8))
    table = learner.make_replay_table()
    table.add(_rollout(0))
    stats = learner.update(table, 32)
    assert stats["alpha"] == pytest.approx(0.2) and "alpha_loss" not in stats


def test_env_runners_are_published_the_policy_alone():
    learner = _learner(SACConfig())
    assert set(learner.weights()) == {keys.MODEL + k for k in learner.actor.state_dict()}
    assert not any("critic" in k for k in learner.weights())


def test_a_restored_learner_continues_exactly_as_the_original():
    cfg = SACConfig(learning_starts=0, batch_size=8, num_qs=3, num_min_qs=2, critic_layer_norm=True)
    a = _learner(cfg, seed=1)
    table_a = a.make_replay_table()
    table_a.add(_rollout(0))
    a.update(table_a, 32)
    saved = a.state()
    b = _learner(cfg, seed=2)
    b.make_replay_table()
    b.load_state(saved)
    table_a.add(_rollout(1))
    b.table.add(_rollout(1))
    torch.set_rng_state(saved["torch_rng"])
    out_a = a.update(table_a, 64)
    torch.set_rng_state(saved["torch_rng"])
    out_b = b.update(b.table, 64)
    assert out_a == out_b
    for name in ("actor", "critic", "critic_target", "temperature"):
        for (k, x), y in zip(getattr(a, name).state_dict().items(), getattr(b, name).state_dict().values()):
            torch.testing.assert_close(x, y, rtol=0, atol=0, msg=f"{name}/{k}")
