"""PPO on agent columns (parameter sharing, IPPO): every agent trains one set of weights, and
dead agent columns (agents that finished early, free slots) contribute no gradient."""

from __future__ import annotations

import copy

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.algos.ppo.loss import ppo_loss
from kilorl.roles.env_runner import EnvRunner
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import tiny_config

SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}
SCRIPTED = {"id": "tests.envs.scripted_agents:parallel_env", "max_num_agents": 2}


def agent_config(env: dict, T: int = 8, copies: int = 2):
    return tiny_config(env=env, algo={"rollout_length": T, "num_minibatches": 1, "update_epochs": 2},
                       parallelism={"actor": 1, "envs_per_actor": copies})


def collected(cfg):
    """A rollout an env runner collected with version 0, and a learner at version 0 (same seed)."""
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    rollout, info = EnvRunner(cfg, store, 0, seed=1).collect(0)
    return rollout, info


def trained(cfg, rollout) -> dict[str, np.ndarray]:
    """Weights of a fresh learner (the config's seed) after one update on ``rollout``."""
    learner = LearnerRole(cfg, InMemoryParameterStore())
    learner.update(1, rollout.env_steps, rollout)
    return learner.algorithm.weights()


def garbled(rollout, rows: np.ndarray, seed: int = 0):
    """``rollout`` with every per-step entry of ``rows`` ([T, N] bool) replaced by large random
    finite values of its dtype (actions: valid ones of the scripted env's two)."""
    out = copy.deepcopy(rollout)
    rng = np.random.default_rng(seed)
    for name, value in out.steps.items():
        if name in (keys.ALIVE, keys.TERMINATED, keys.TRUNCATED):
            continue
        noise = rng.integers(0, 2, size=value.shape) if value.dtype.kind == "i" else rng.normal(0, 50, value.shape)
        value[rows] = noise.astype(value.dtype)[rows]
    return out


def test_a_masked_loss_is_the_loss_of_the_live_rows_alone():
    g = torch.Generator().manual_seed(0)
    new_logp, old_logp, adv, new_v, old_v, ret, ent = (torch.randn(12, generator=g) for _ in range(7))
    mask = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1], dtype=torch.float32)
    live = mask > 0
    masked = ppo_loss(new_logp, old_logp, adv, new_v, old_v, ret, ent, clip_coef=0.2, vf_coef=0.5, ent_coef=0.01,
                      mask=mask)
    alone = ppo_loss(new_logp[live], old_logp[live], adv[live], new_v[live], old_v[live], ret[live], ent[live],
                     clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)
    for field in ("total", "policy", "value", "entropy", "approx_kl", "clip_fraction"):
        torch.testing.assert_close(getattr(masked, field), getattr(alone, field))


def test_agents_that_finished_early_contribute_no_gradient():
    cfg = agent_config(SCRIPTED)
    rollout, _ = collected(cfg)
    dead = ~rollout.steps[keys.ALIVE]
    assert dead.sum() == 4  # a_0's slot of each copy after a_0 terminated, until `late` appears (t = 2 and 7)
    reference = trained(cfg, rollout)
    after_dead_garbled = trained(cfg, garbled(rollout, dead))
    for name, value in reference.items():
        np.testing.assert_array_equal(after_dead_garbled[name], value, err_msg=name)
    live_row = np.zeros_like(dead)
    live_row[0, 0] = True  # the control: one live row's data does reach the weights
    after_live_garbled = trained(cfg, garbled(rollout, live_row))
    assert any(not np.array_equal(after_live_garbled[k], v) for k, v in reference.items())


def test_three_simple_spread_agents_share_one_set_of_weights_and_each_moves_it():
    cfg = agent_config(SPREAD, T=8, copies=2)
    rollout, info = collected(cfg)
    assert rollout.shape == (8, 6) and info["env_steps"] == 16 and rollout.steps[keys.ALIVE].all()
    single_agent = LearnerRole(tiny_config(), InMemoryParameterStore()).algorithm.weights()
    start = LearnerRole(cfg, InMemoryParameterStore()).algorithm.weights()
    assert set(start) == set(single_agent)  # one network, no per-agent parameters
    moved = []
    for agent in range(3):  # only this agent's columns live: its experience alone trains the shared network
        alone = copy.deepcopy(rollout)
        alone.steps[keys.ALIVE][:] = False
        alone.steps[keys.ALIVE][:, agent::3] = True
        weights = trained(cfg, alone)
        moved.append(np.concatenate([weights[k].ravel() - start[k].ravel() for k in sorted(start)]))
        assert np.abs(moved[-1]).max() > 0
    assert not np.allclose(moved[0], moved[1]) and not np.allclose(moved[1], moved[2])
