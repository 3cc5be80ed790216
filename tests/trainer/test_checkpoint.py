"""Checkpoints round-trip every piece of learner state, and are written atomically."""

from __future__ import annotations

import torch

from kilorl.algos.api import RolloutBatch
from kilorl.roles.grad_comm import AllReduceComm
from kilorl.roles.learner import build_algorithm
from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tests.conftest import fake_rollout, tiny_config


def make_learner(cfg):
    return build_algorithm(cfg, AllReduceComm(1))


def test_round_trip_restores_weights_optimizer_and_normalizers(tmp_path):
    cfg = tiny_config(env={"id": "CartPole-v1", "normalize_obs": True})
    learner = make_learner(cfg)
    learner.update(RolloutBatch(fake_rollout(0, with_moments=True)), 128)
    path = save_checkpoint(tmp_path, learner.state(), {"env_steps": 128, "iteration": 1, "config": cfg.model_dump(mode="json")})
    state, meta = load_checkpoint(tmp_path)
    assert meta["env_steps"] == 128 and meta["iteration"] == 1 and path == latest_checkpoint(tmp_path)

    fresh = make_learner(cfg)
    fresh.load_state(state)
    for a, b in zip(learner.model.parameters(), fresh.model.parameters()):
        assert torch.equal(a, b)
    sa, sb = learner.ac.optimizer.state_dict(), fresh.ac.optimizer.state_dict()
    for idx in sa["state"]:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(torch.as_tensor(sa["state"][idx][key]), torch.as_tensor(sb["state"][idx][key]))
    assert sa["param_groups"][0]["lr"] == sb["param_groups"][0]["lr"]
    assert (fresh.ac.obs_rms.mean == learner.ac.obs_rms.mean).all() and fresh.ac.obs_rms.count == learner.ac.obs_rms.count
    assert fresh.ac.obs_rms.count > 128  # the rollout's moments were merged
    # Same RNG + same state => the next update is bit-identical.
    torch.manual_seed(7)
    s1 = learner.update(RolloutBatch(fake_rollout(1)), 256)
    torch.manual_seed(7)
    s2 = fresh.update(RolloutBatch(fake_rollout(1)), 256)
    assert s1["policy_loss"] == s2["policy_loss"]


def test_keeps_newest_and_ignores_partial_writes(tmp_path):
    cfg = tiny_config()
    learner = make_learner(cfg)
    for steps in (100, 200, 300, 400):
        save_checkpoint(tmp_path, learner.state(), {"env_steps": steps}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step_000000000300", "step_000000000400"]
    # A crash mid-write leaves a temp dir (and a dir without meta.json): neither is "latest".
    (tmp_path / "checkpoints" / ".tmp-step_000000000500-1").mkdir()
    (tmp_path / "checkpoints" / "step_000000000600").mkdir()
    assert latest_checkpoint(tmp_path).name == "step_000000000400"
