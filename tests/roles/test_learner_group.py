"""Several learners all-reduce gradients over torch.distributed and stay identical."""

from __future__ import annotations

import numpy as np
import pytest

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


def _trained_weights(cfg, batches, world: int) -> list[dict[str, np.ndarray]]:
    """Rank 0's initial model weights, then every rank's after one update per batch (rank r
    trains on actors r, r + world, ...).

    ``world`` learners meet over the trainer's own path (rank 0's rendezvous, gloo, the
    learner's ``GradientComm``), each in its own Ray process, as ``OnPolicyLoop`` feeds them.
    """
    import ray

    store = RayParameterStore.create(1)
    remote = ray.remote(num_cpus=1)(LearnerProcess)
    learners = [remote.remote(cfg, store, r, world, "gloo") for r in range(world)]
    try:
        master = ray.get(learners[0].rendezvous.remote()) if world > 1 else None
        ray.get([lr.start.remote(master) for lr in learners])
        initial = ray.get(learners[0].state.remote())
        for version, rollouts in enumerate(batches, start=1):
            steps = version * cfg.rollout_steps
            ray.get([lr.update.remote(version, steps, *rollouts[r::world]) for r, lr in enumerate(learners)])
        states = ray.get([lr.state.remote() for lr in learners])
    finally:
        for h in [*learners, *store.shards]:
            ray.kill(h)
    return [{k: v.numpy() for k, v in s["model"].items()} for s in [initial, *states]]


@pytest.mark.parametrize(("algo", "micro", "minibatches"),
                         [("ppo", 1, 2), ("ppo", 4, 2), ("ppo", 4, 1), ("a2c", 1, None), ("a2c", 4, None)])
def test_one_and_two_learners_on_the_same_rollouts_end_with_equal_parameters(ray_local, algo, micro, minibatches):
    fields = {"name": algo, "rollout_length": 32}
    if algo == "ppo":  # one minibatch: each rank's whole shard, in order (``minibatches``)
        fields |= {"num_minibatches": minibatches, "update_epochs": 2}
    sections = {"algo": fields, "train": {"gradient_accumulation_steps": micro, "total_env_steps": 4096},
                "env": {"normalize_obs": True}}
    # three updates, two actors' rollouts each (with observation moments, so the normalizer is merged too)
    batches = [[fake_rollout(seed=10 * i + a, with_moments=True) for a in range(2)] for i in range(3)]
    untrained, one = _trained_weights(tiny_config(parallelism={"learner": 1, "actor": 2}, **sections), batches, 1)
    _, *two = _trained_weights(tiny_config(parallelism={"learner": 2, "actor": 2}, **sections), batches, 2)
    for name, value in one.items():
        assert not np.allclose(value, untrained[name]), f"{name} did not train"  # the comparison means something
        np.testing.assert_array_equal(two[0][name], two[1][name])  # the ranks took identical steps
        np.testing.assert_allclose(two[0][name], value, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("sequences", [{}, {"sequence_mode": "chunks", "sequence_length": 12, "burn_in": 4}],
                         ids=["columns", "chunks"])
def test_one_and_two_learners_end_equal_on_a_recurrent_model_split_by_env_columns(ray_local, sequences):
    """Minibatches of whole env columns (or of chunks with burn-in), each unrolled from its
    saved state: the ranks' shares together are one learner's minibatch (two minibatches, each
    in two micro-batches)."""
    sections = {"algo": {"rollout_length": 32, "num_minibatches": 2, "update_epochs": 2, **sequences},
                "train": {"gradient_accumulation_steps": 2, "total_env_steps": 4096},
                "model": {"recurrent": {"type": "lstm", "hidden_size": 8}}}
    rng = np.random.default_rng(5)
    batches = []
    for i in range(2):
        rollouts = [fake_rollout(seed=10 * i + a) for a in range(2)]
        for r in rollouts:  # a saved state at rollout start, as an actor's policy leaves it
            r.state = {k: rng.normal(size=(4, 1, 8)).astype(np.float32) for k in ("pi_h", "pi_c", "vf_h", "vf_c")}
        batches.append(rollouts)
    untrained, one = _trained_weights(tiny_config(parallelism={"learner": 1, "actor": 2}, **sections), batches, 1)
    _, *two = _trained_weights(tiny_config(parallelism={"learner": 2, "actor": 2}, **sections), batches, 2)
    for name, value in one.items():
        assert not np.allclose(value, untrained[name]), f"{name} did not train"
        np.testing.assert_array_equal(two[0][name], two[1][name])
        np.testing.assert_allclose(two[0][name], value, rtol=1e-4, atol=1e-5, err_msg=name)
