"""The migration decision: who is moved, in what order, and never twice at once."""

from __future__ import annotations

import math

from kilorl.monitor.migration import MemoryStatus, MigrationPolicy, decide
from kilorl.monitor.settings import MigrationConfig

GiB = 2**30


def status(role="actor", rank=0, memory="host", suspected=True, ttl=60.0, node="n0") -> MemoryStatus:
    return MemoryStatus(role, rank, node, memory, suspected, 2**20, 1 * GiB, 2 * GiB, ttl)


def test_a_suspected_role_inside_the_horizon_is_moved_and_one_outside_is_not():
    out = decide([status(ttl=60.0), status(rank=1, ttl=600.0)], migrate_before_s=120)
    assert [(d.role, d.rank) for d in out] == [("actor", 0)]
    assert "migrate_before_s=120" in out[0].reason and out[0].exclude_device is None


def test_unsuspected_or_unbounded_series_are_never_moved():
    assert decide([status(suspected=False, ttl=1.0), status(rank=1, ttl=math.inf)], 120) == []


def test_the_most_urgent_series_of_a_role_decides_and_roles_are_ordered_by_urgency():
    out = decide([status(ttl=100), status(memory="device:1", ttl=30), status("learner", 0, ttl=50)], 120)
    assert [(d.role, d.memory) for d in out] == [("actor", "device:1"), ("learner", "host")]
    assert out[0].exclude_device == "1"


def test_the_policy_caps_a_round_and_does_not_decide_a_role_twice_within_the_cooldown():
    policy = MigrationPolicy(MigrationConfig(migrate_before_s=120, cooldown_s=300, max_concurrent=1))
    s = [status("actor", 0, ttl=40), status("actor", 1, ttl=20)]
    assert [d.rank for d in policy.decide(s, now=0.0)] == [1]
    assert [d.rank for d in policy.decide(s, now=1.0)] == [0]
    assert policy.decide(s, now=2.0) == []
    assert [d.rank for d in policy.decide(s, now=400.0)] == [1]
    policy.forget("actor", 0)
    assert [d.rank for d in policy.decide(s, now=401.0)] == [0]
