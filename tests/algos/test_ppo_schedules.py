"""PPO's schedules: the learning rate and, with ``anneal_clip``, the clip range decay to 0 over the run."""

import pytest
import torch

from kilorl.algos.api import RolloutBatch
from kilorl.roles.grad_comm import make_grad_comm
from kilorl.roles.learner import build_algorithm
from tests.conftest import fake_rollout, tiny_config

TOTAL = 4096


def _stats(anneal_clip: bool, env_steps: int, **algo) -> dict[str, float]:
    cfg = tiny_config(algo={"clip_coef": 0.2, "anneal_clip": anneal_clip, "num_minibatches": 1, **algo},
                      train={"total_env_steps": TOTAL})
    torch.manual_seed(0)
    learner = build_algorithm(cfg, make_grad_comm(cfg, 1))
    return learner.update(RolloutBatch(fake_rollout(0)), env_steps)


@pytest.mark.parametrize("env_steps, share", [(0, 1.0), (1024, 0.75), (3072, 0.25), (TOTAL, 0.0)])
def test_an_annealed_clip_range_is_the_remaining_share_of_the_run(env_steps, share):
    annealed, fixed = _stats(True, env_steps), _stats(False, env_steps)
    assert annealed["clip_coef"] == pytest.approx(0.2 * share)
    assert fixed["clip_coef"] == 0.2
    assert annealed["lr"] == pytest.approx(fixed["lr"])  # the learning rate's schedule is unchanged by it


def test_the_annealed_clip_range_is_the_one_the_loss_clips_with():
    # Two epochs: the first step is the same either way (every ratio is 1), so the second
    # epoch sees the same ratios and only the clip range differs. A narrower range clips more.
    kw = {"update_epochs": 2, "lr": 0.05, "anneal_lr": False, "clip_vloss": False}
    narrow, wide = _stats(True, 3 * TOTAL // 4, **kw), _stats(False, 3 * TOTAL // 4, **kw)
    assert narrow["clip_coef"] == pytest.approx(0.05)
    assert narrow["clip_fraction"] > wide["clip_fraction"]
