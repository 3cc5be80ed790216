"""The ParameterStore contract (docs/architecture.md, "Contracts"), for both implementations."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kilorl.roles.parameter_store import InMemoryParameterStore, RayParameterStore, shard_of


@pytest.fixture(params=["memory", "ray"])
def store(request):
    if request.param == "memory":
        yield InMemoryParameterStore(keep=3)
    else:
        request.getfixturevalue("ray_local")
        s = RayParameterStore.create(num_shards=3, keep=3)
        yield s
        import ray

        for shard in s.shards:
            ray.kill(shard)


def weights(v: float) -> dict[str, np.ndarray]:
    return {f"layer{i}.weight": np.full((4, 4), v + i, np.float32) for i in range(6)}


def test_nothing_published(store):
    assert store.latest_version("policy") is None
    with pytest.raises(KeyError):
        store.fetch("policy")


def test_fetch_returns_one_complete_version(store):
    store.publish("policy", 1, weights(1.0))
    store.publish("policy", 2, weights(2.0))
    assert store.latest_version("policy") == 2
    v, tensors = store.fetch("policy")
    assert v == 2 and set(tensors) == set(weights(0))
    assert all(np.all(np.asarray(t) == 2.0 + i) for i, (_, t) in enumerate(sorted(tensors.items())))
    v, old = store.fetch("policy", version=1)
    assert v == 1 and np.asarray(old["layer0.weight"])[0, 0] == 1.0


def test_versions_must_increase(store):
    store.publish("policy", 5, weights(5.0))
    with pytest.raises(Exception, match="not newer"):
        store.publish("policy", 5, weights(6.0))
    assert np.asarray(store.fetch("policy")[1]["layer0.weight"])[0, 0] == 5.0


def test_old_versions_are_reclaimed(store):
    for v in range(1, 6):
        store.publish("policy", v, weights(float(v)))
    with pytest.raises(Exception, match="not held"):
        store.fetch("policy", version=1)
    assert store.fetch("policy", version=3)[0] == 3


def test_layout_fetches_only_requested_tensors(store):
    store.publish("policy", 1, weights(1.0))
    _, part = store.fetch("policy", layout=["layer2.weight", "layer5.weight"])
    assert set(part) == {"layer2.weight", "layer5.weight"}
    with pytest.raises(Exception, match="no tensors"):
        store.fetch("policy", layout=["missing"])


def test_wait_blocks_until_publish(store):
    store.publish("policy", 1, weights(1.0))
    started = threading.Event()
    result: dict[str, int] = {}

    def waiter():
        started.set()
        result["v"] = store.wait("policy", 2, timeout=30)

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    assert "v" not in result  # nothing >= 2 yet
    store.publish("policy", 2, weights(2.0))
    t.join(30)
    assert result["v"] == 2


def test_wait_times_out(store):
    store.publish("policy", 1, weights(1.0))
    with pytest.raises(TimeoutError):
        store.wait("policy", 7, timeout=0.2)
    assert store.wait("policy", 1, timeout=1) == 1


def test_sharding_is_stable_and_spreads():
    names = [f"model/layer{i}.weight" for i in range(64)]
    shards = [shard_of(n, 4) for n in names]
    assert shards == [shard_of(n, 4) for n in names]
    assert len(set(shards)) == 4


def test_fetch_into_copies_a_version_into_the_given_tensors_and_refuses_a_mismatch_before_copying(store):
    import torch

    store.publish("p", 1, {"w": np.full((2, 3), 1.5, np.float32), "b": np.full(3, 2.5, np.float32)})
    out = {"w": torch.zeros(2, 3), "b": torch.zeros(3)}
    ptr = out["w"].data_ptr()
    assert store.fetch_into("p", out) == 1
    assert out["w"].data_ptr() == ptr and bool((out["w"] == 1.5).all()) and bool((out["b"] == 2.5).all())
    assert store.fetch_into("p", {"w": torch.zeros(2, 3)}, layout=["w"]) == 1  # only the names asked for
    store.publish("p", 2, {"w": np.full((2, 3), 7.0, np.float32), "b": np.full(3, 7.0, np.float32)})
    with pytest.raises(ValueError, match=r"w: destination is torch.float32 \[3, 2\]"):
        store.fetch_into("p", {"b": out["b"], "w": torch.zeros(3, 2)})
    assert bool((out["b"] == 2.5).all())  # nothing was copied


def test_a_wait_with_a_zero_timeout_is_a_look_the_version_if_there_else_a_timeout(store):
    """(What an env runner's mid-rollout refresh relies on: ``algo.queue.refresh_every_steps``.)"""
    store.publish("policy", 1, weights(1.0))
    assert store.wait("policy", 1, 0.0) == 1
    with pytest.raises(TimeoutError):
        store.wait("policy", 2, 0.0)
