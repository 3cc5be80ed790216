"""Several learners all-reduce gradients over torch.distributed and stay identical."""

from __future__ import annotations

import numpy as np

from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import RayParameterStore
from tests.conftest import fake_rollout, tiny_config


def test_two_learners_take_identical_steps_on_different_data(ray_local):
    import ray

    from kilorl.trainer.session import _free_port

    cfg = tiny_config(parallelism={"learner": 2, "actor": 2})
    store = RayParameterStore.create(2)
    remote = ray.remote(num_cpus=1)(LearnerRole)
    master = ("127.0.0.1", _free_port())
    learners = [remote.remote(cfg, store, r, 2, "gloo", master) for r in range(2)]
    before = ray.get([lr.weights_digest.remote() for lr in learners])
    assert before[0] == before[1]  # rank 0's initial weights were broadcast
    stats = ray.get([lr.update.remote(1, 256, fake_rollout(seed=r)) for r, lr in enumerate(learners)])
    after = ray.get([lr.weights_digest.remote() for lr in learners])
    assert after[0] == after[1] != before[0]
    assert all(np.isfinite(s["policy_loss"]) for s in stats)
    assert store.latest_version("policy") == 1  # rank 0 published
    for h in [*learners, *store.shards]:
        ray.kill(h)
