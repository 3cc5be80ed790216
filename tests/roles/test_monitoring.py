"""The measuring store wrappers the Ray shells give roles when the monitor is on."""

from __future__ import annotations

import numpy as np

from kilorl.algos import keys
from kilorl.monitor.reporter import RoleMetrics
from kilorl.roles.monitoring import PUBLISHED_AT, FetchingStore, PublishingStore
from kilorl.roles.parameter_store import InMemoryParameterStore


def _value(m: RoleMetrics, name: str, **labels: str) -> float | None:
    labels = {"role": m.role, "rank": str(m.rank), "node": m.node, **labels}
    return m.registry.get_sample_value(name, labels)


def _weights() -> dict[str, np.ndarray]:
    return {keys.MODEL + "w": np.ones(256, np.float32)}


def test_a_published_version_carries_its_time_and_the_actor_measures_latency_lag_and_bytes():
    inner = InMemoryParameterStore()
    learner = RoleMetrics("learner", 0, "n0", sample_resources=False)
    actor = RoleMetrics("actor", 0, "n0", sample_resources=False)
    pub, sub = PublishingStore(inner, learner), FetchingStore(inner, actor)
    pub.publish(keys.POLICY, 0, _weights())
    assert PUBLISHED_AT in inner.fetch(keys.POLICY, 0)[1]
    assert sub.wait(keys.POLICY, 0, 1.0) == 0
    version, tensors = sub.fetch(keys.POLICY, 0, [keys.MODEL + "w"])
    assert version == 0 and set(tensors) == {keys.MODEL + "w"}  # the stamp never reaches the role
    assert _value(actor, "kilorl_param_publish_latency_seconds_count") == 1
    assert _value(actor, "kilorl_comm_bytes_total", direction="received") == 1024
    assert _value(learner, "kilorl_comm_bytes_total", direction="sent") == 1024 + 8
    pub.publish(keys.POLICY, 1, _weights())
    pub.publish(keys.POLICY, 2, _weights())
    assert sub.wait(keys.POLICY, 1, 1.0) == 2
    assert _value(actor, "kilorl_policy_lag_versions") == 2  # it acted with 0 while 2 was out


def test_without_the_publishers_stamp_the_actor_still_fetches_and_stops_asking_for_it():
    inner = InMemoryParameterStore()
    actor = RoleMetrics("actor", 0, "n0", sample_resources=False)
    inner.publish(keys.POLICY, 0, _weights())  # a publisher that is not monitored
    sub = FetchingStore(inner, actor)
    version, tensors = sub.fetch(keys.POLICY, 0, [keys.MODEL + "w"])
    assert version == 0 and set(tensors) == {keys.MODEL + "w"}
    assert _value(actor, "kilorl_param_publish_latency_seconds_count") is None
    assert sub._stamped is False


def test_a_copy_into_the_actors_tensors_measures_latency_and_bytes_and_leaves_the_stamp_out():
    import torch

    inner = InMemoryParameterStore()
    actor = RoleMetrics("actor", 0, "n0", sample_resources=False)
    pub, sub = PublishingStore(inner, RoleMetrics("learner", 0, "n0", sample_resources=False)), FetchingStore(inner, actor)
    pub.publish(keys.POLICY, 0, _weights())
    out = {keys.MODEL + "w": torch.zeros(256)}
    assert sub.fetch_into(keys.POLICY, out, None, [keys.MODEL + "w"]) == 0
    assert set(out) == {keys.MODEL + "w"} and bool((out[keys.MODEL + "w"] == 1.0).all())
    assert _value(actor, "kilorl_param_publish_latency_seconds_count") == 1
    assert _value(actor, "kilorl_comm_bytes_total", direction="received") == 1024
    assert sub.held == 0


def test_a_copy_without_the_publishers_stamp_still_lands_and_stops_asking_for_it():
    import torch

    inner = InMemoryParameterStore()
    actor = RoleMetrics("actor", 0, "n0", sample_resources=False)
    inner.publish(keys.POLICY, 0, _weights())
    sub = FetchingStore(inner, actor)
    out = {keys.MODEL + "w": torch.zeros(256)}
    assert sub.fetch_into(keys.POLICY, out) == 0 and bool((out[keys.MODEL + "w"] == 1.0).all())
    assert _value(actor, "kilorl_param_publish_latency_seconds_count") is None and sub._stamped is False
