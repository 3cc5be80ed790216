"""The PPO objective against numbers worked out by hand."""

import math

import pytest
import torch

from kilorl.algos.ppo.loss import ppo_loss


def test_clipped_objective_matches_hand_computation():
    new_logp = torch.tensor([math.log(1.5), math.log(0.5)])
    old_logp = torch.zeros(2)
    adv = torch.tensor([1.0, -1.0])
    new_v, old_v, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), torch.tensor([2.0, 0.0])
    ent = torch.tensor([0.5, 0.7])
    out = ppo_loss(new_logp, old_logp, adv, new_v, old_v, ret, ent,
                   clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=True, norm_adv=False)
    # ratio 1.5, A=+1: max(-1.5, -1.2) = -1.2; ratio 0.5, A=-1: max(0.5, 0.8) = 0.8
    assert out.policy.item() == pytest.approx(-0.2)
    # unclipped (1, 0); clipped values (0.7, 0.3) -> (1.69, 0.09); max -> (1.69, 0.09); 0.5*mean
    assert out.value.item() == pytest.approx(0.445)
    assert out.entropy.item() == pytest.approx(0.6)
    assert out.total.item() == pytest.approx(-0.2 - 0.01 * 0.6 + 0.5 * 0.445, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(1.0)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert out.approx_kl.item() == pytest.approx(kl, rel=1e-5)


def test_unclipped_value_loss_and_identity_ratio():
    logp = torch.tensor([-0.3, -1.2])
    out = ppo_loss(logp, logp.clone(), torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0]), torch.zeros(2),
                   torch.tensor([0.0, 3.0]), torch.zeros(2), clip_coef=0.2, vf_coef=1.0, ent_coef=0.0,
                   clip_vloss=False, norm_adv=False)
    assert out.policy.item() == pytest.approx(-(2.0 - 1.0) / 2)
    assert out.value.item() == pytest.approx(0.5 * (1 + 4) / 2)
    assert out.approx_kl.item() == pytest.approx(0.0) and out.clip_fraction.item() == 0.0


def test_advantage_normalization_makes_scale_irrelevant():
    logp_new = torch.tensor([-0.1, -0.5, -0.9])
    logp_old = torch.tensor([-0.2, -0.4, -1.0])
    kw = dict(clip_coef=0.2, vf_coef=0.0, ent_coef=0.0, norm_adv=True)
    a = torch.tensor([1.0, -2.0, 0.5])
    small = ppo_loss(logp_new, logp_old, a, torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3), **kw)
    big = ppo_loss(logp_new, logp_old, 100 * a, torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3), **kw)
    assert small.policy.item() == pytest.approx(big.policy.item(), rel=1e-5)
