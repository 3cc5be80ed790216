"""Several learners all-reduce gradients over torch.distributed and stay identical."""

from __future__ import annotations

import numpy as np

from kilorl.roles.parameter_store import RayParameterStore
from kilorl.roles.remote import LearnerProcess
from tests.conftest import fake_rollout, tiny_config


def test_two_learners_meet_at_rank_0s_address_and_take_identical_steps(ray_local):
    import ray

    cfg = tiny_config(parallelism={"learner": 2, "actor": 2})
    store = RayParameterStore.create(2)
    remote = ray.remote(num_cpus=1)(LearnerProcess)
    learners = [remote.remote(cfg, store, r, 2, "gloo") for r in range(2)]
    host, port = ray.get(learners[0].rendezvous.remote())
    assert host == ray.util.get_node_ip_address() and port > 0  # rank 0's node, not the driver's loopback
    ray.get([lr.start.remote((host, port)) for lr in learners])
    before = ray.get([lr.weights_digest.remote() for lr in learners])
    assert before[0] == before[1]  # rank 0's initial weights were broadcast
    stats = ray.get([lr.update.remote(1, 256, fake_rollout(seed=r)) for r, lr in enumerate(learners)])
    after = ray.get([lr.weights_digest.remote() for lr in learners])
    assert after[0] == after[1] != before[0]
    assert all(np.isfinite(s["policy_loss"]) for s in stats)
    assert store.latest_version("policy") == 1  # rank 0 published
    for h in [*learners, *store.shards]:
        ray.kill(h)
