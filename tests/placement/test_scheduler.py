"""Gang scheduling: all-or-nothing, affinities, islands, fractional shares, scores."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.placement import (
    Affinity,
    Allocation,
    CapacityState,
    Demand,
    GangRequest,
    PlacementError,
    place,
    topology_from_dict,
    uniform_topology,
)
from kilorl.placement.allreduce import allreduce_estimate
from kilorl.placement.fragmentation import Workload, total_fragmentation
from kilorl.placement.policies import POLICIES

ALL = list(POLICIES)


@pytest.fixture
def small(small_topology_dict):
    return CapacityState(topology_from_dict(small_topology_dict))


def snapshot(state):
    return state.gpu_free.copy(), state.cpu_free.copy(), state.mem_free.copy()


@pytest.mark.parametrize("policy", ALL)
def test_gang_is_all_or_nothing(small, policy):
    before = snapshot(small)
    reqs = [GangRequest("a", 3, Demand.of(2, 1, 1)), GangRequest("b", 3, Demand.of(4, 1, 1))]  # 6 + 12 > 16 GPUs
    with pytest.raises(PlacementError) as info:
        place(small, reqs, policy)
    # binpack-topo places the bigger gang first, the others keep the request order.
    assert info.value.role in ("a", "b") and "fits nowhere" in str(info.value)
    for a, b in zip(before, snapshot(small)):
        np.testing.assert_array_equal(a, b)
    ok = place(small, reqs[:1], policy)
    assert len(ok.allocations) == 3 and ok.state.allocated_gpu_milli == 6000
    assert small.allocated_gpu_milli == 0  # the input state is never modified


@pytest.mark.parametrize("policy", ALL)
def test_required_same_island(small, policy):
    req = GangRequest("l", 2, Demand.of(1, 1, 1), (Affinity("same_island", required=True),), collective=True)
    p = place(small, [req], policy)
    nodes = {a.node for a in p.allocations}
    islands = {int(p.state.island[a.node, g]) for a in p.allocations for g in a.gpus}
    assert len(nodes) == 1 and len(islands) == 1
    assert p.allreduce["l"].worst_link == "NV"
    too_big = GangRequest("l", 3, Demand.of(1, 1, 1), (Affinity("same_island", required=True),))
    with pytest.raises(PlacementError, match="one NVLink island"):
        place(small, [too_big], policy)


@pytest.mark.parametrize("policy", ALL)
def test_required_near_role_keeps_the_leaf(small, policy):
    reqs = [
        GangRequest("learner", 2, Demand.of(1, 1, 1), collective=True),
        GangRequest("ps", 4, Demand.of(0, 2, 4), (Affinity("near_role", role="learner", required=True),)),
    ]
    p = place(small, reqs, policy)
    roles = p.by_role()
    leaves = {p.state.leaf[a.node] for a in roles["learner"]}
    assert {p.state.leaf[a.node] for a in roles["ps"]} <= leaves


def test_near_role_must_name_a_requested_role(small):
    with pytest.raises(PlacementError, match="not in the request"):
        place(small, [GangRequest("ps", 1, Demand.of(0, 1, 1), (Affinity("near_role", role="ghost"),))])


@pytest.mark.parametrize("policy", ALL)
def test_required_spread_uses_distinct_failure_domains(small, policy):
    # Failure domain defaults to the leaf switch: 2 leaves here.
    p = place(small, [GangRequest("r", 2, Demand.of(0, 1, 1), (Affinity("spread", required=True),))], policy)
    assert len({p.state.domain[a.node] for a in p.allocations}) == 2
    with pytest.raises(PlacementError, match="failure domains"):
        place(small, [GangRequest("r", 3, Demand.of(0, 1, 1), (Affinity("spread", required=True),))], policy)
    # Leaf 1 is full: two domains exist but only one has room.
    busy = small.copy()
    for node in (2, 3):
        busy.allocate(Allocation("bg", node, node, (0, 1, 2, 3), 1000, 32000, 0))
    with pytest.raises(PlacementError, match="only 1 failure domains have room"):
        place(busy, [GangRequest("r", 2, Demand.of(0, 1, 1), (Affinity("spread", required=True),))], policy)
    # Preferred spread still places when it cannot spread.
    soft = place(busy, [GangRequest("r", 2, Demand.of(0, 1, 1), (Affinity("spread"),))], policy)
    assert len({soft.state.domain[a.node] for a in soft.allocations}) == 1


def test_learner_group_lands_in_one_island_when_one_fits(small):
    # Fragment the cluster: node 0 keeps only GPUs 1 and 3 free (two islands, one free GPU
    # each), node 1 keeps island {2,3} whole; the rest is busy except node 3's GPU 0.
    busy = small.copy()
    for node, gpus in ((0, (0, 2)), (1, (0, 1)), (2, (0, 1, 2, 3)), (3, (1, 2, 3))):
        busy.allocate(Allocation("bg", node, node, gpus, 1000, 1000, 1024))
    req = GangRequest("learner", 2, Demand.of(1, 1, 1), (Affinity("same_island"),), collective=True)
    p = place(busy, [req], "binpack-topo")
    assert {(a.node, a.gpus) for a in p.allocations} == {(1, (2,)), (1, (3,))}
    assert p.allreduce["learner"].worst_link == "NV"
    # first-fit takes the lowest free devices instead: across islands or nodes.
    ff = place(busy, [req], "first-fit")
    assert ff.allreduce["learner"].seconds > p.allreduce["learner"].seconds


def test_large_learner_group_spans_fewest_nodes_one_leaf():
    state = CapacityState(uniform_topology(32, 8, nodes_per_leaf=8))
    # The first leaf is half busy (3 of 8 GPUs free per node); the others are idle.
    for n in range(8):
        state.allocate(Allocation("bg", n, n, (0, 1, 2, 3, 4), 1000, 1000, 1024))
    req = GangRequest("learner", 16, Demand.of(1, 2, 8), (Affinity("same_island"),), collective=True)
    p = place(state, [req], "binpack-topo")
    est = p.allreduce["learner"]
    assert est.nodes == 2 and est.leaves == 1
    assert place(state, [req], "first-fit").allreduce["learner"].nodes == 6
    for other in ("first-fit", "spread"):
        assert place(state, [req], other).allreduce["learner"].seconds > est.seconds


def test_fractional_shares_pack_two_per_gpu(small):
    p = place(small, [GangRequest("actor", 4, Demand.of(0.5, 1, 1))], "binpack-topo")
    devices = {(a.node, a.gpus) for a in p.allocations}
    assert len(devices) == 2
    assert (p.state.gpu_free >= 0).all() and p.state.allocated_gpu_milli == 2000
    sp = place(small, [GangRequest("actor", 4, Demand.of(0.5, 1, 1))], "spread")
    assert len({a.node for a in sp.allocations}) == 4


def test_gpu_model_constraint(repo):
    from kilorl.placement import load_topology

    state = CapacityState(load_topology(repo / "examples/clusters/heterogeneous.yaml"))
    req = GangRequest("inf", 10, Demand.of(1, 1, 1, gpu_models=frozenset({"L4"})))
    for policy in ALL:
        p = place(state, [req], policy)
        assert {state.topology.nodes[a.node].gpus[0].model for a in p.allocations} == {"L4"}
    with pytest.raises(PlacementError):
        place(state, [GangRequest("inf", 17, Demand.of(1, 1, 1, gpu_models=frozenset({"L4"})))])


def test_reference_layout_on_1024_gpus(repo):
    from kilorl.placement import load_topology

    state = CapacityState(load_topology(repo / "examples/clusters/1024xH100.yaml"))
    reqs = [
        GangRequest("learner", 32, Demand.of(1, 8, 64), (Affinity("same_island"),), collective=True),
        GangRequest("parameter_server", 16, Demand.of(0, 4, 32), (Affinity("near_role", role="learner"),)),
        GangRequest("actor", 80, Demand.of(0.5, 4, 16)),
    ]
    p = place(state, reqs, "binpack-topo")
    s = p.role_summary("learner")
    # 32 learners on 4 nodes x 8 GPUs: each node's NVSwitch island full, all under one leaf.
    assert len(s["nodes"]) == 4 and len(s["leaves"]) == 1 and s["islands"] == 4
    assert set(p.role_summary("parameter_server")["nodes"]) <= set(s["nodes"])
    assert p.allocation_rate == pytest.approx((32 + 40) / 1024)
    spread = place(state, reqs, "spread")
    assert spread.allreduce["learner"].seconds > p.allreduce["learner"].seconds


def test_allreduce_estimate_orders_placements():
    topo = uniform_topology(32, 8, nodes_per_leaf=16)
    one_island = allreduce_estimate(topo, [(0, g) for g in range(8)], 4e8)
    four_nodes = allreduce_estimate(topo, [(n, g) for n in range(4) for g in range(8)], 4e8)
    spread = allreduce_estimate(topo, [(n, 0) for n in range(32)], 4e8)
    assert one_island.worst_link == "NV" and one_island.net_seconds == 0
    assert one_island.seconds < four_nodes.seconds < spread.seconds
    assert spread.leaves == 2 and four_nodes.leaves == 1
    # The formula by hand for the island case: 2 (g-1)/g S / B + 2 (g-1) alpha.
    assert one_island.seconds == pytest.approx(2 * 7 / 8 * 4e8 / 450e9 + 14 * 2e-6)


def test_fgd_fragmentation_by_hand(small_topology_dict):
    state = CapacityState(topology_from_dict(small_topology_dict))
    # Node 0: GPU0 has 300 milli free, GPU1 600, GPU2/3 whole. Others fully used.
    for node in (1, 2, 3):
        state.allocate(Allocation("bg", node, node, (0, 1, 2, 3), 1000, 0, 0))
    state.allocate(Allocation("x", 0, 0, (0,), 700, 0, 0))
    state.allocate(Allocation("y", 0, 0, (1,), 400, 0, 0))
    half = Demand.of(0.5, 1, 1)
    whole2 = Demand.of(2, 1, 1)
    wl = Workload.of([half, whole2], state.model_names)  # 50 / 50
    # half: devices with < 500 free are stranded -> 300; two whole GPUs: partial devices -> 900.
    assert total_fragmentation(state, wl) == pytest.approx(0.5 * 0.3 + 0.5 * 0.9)
    # A task that cannot fit at all (CPU) makes all free share fragmented.
    big_cpu = Demand.of(0.5, 64, 1)
    wl2 = Workload.of([big_cpu], state.model_names)
    assert total_fragmentation(state, wl2) == pytest.approx(2.9)


def test_demand_validation():
    assert Demand.of(0.25, 1, 1).gpu_milli == 250 and Demand.of(0.25, 1, 1).shared
    assert Demand.of(2, 1, 1).total_gpu_milli == 2000
    with pytest.raises(ValueError, match="whole number"):
        Demand.of(1.5, 1, 1)
    with pytest.raises(ValueError, match="affinity kind"):
        Affinity("nearby")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="near_role needs role"):
        Affinity("near_role")
    with pytest.raises(ValueError, match="unknown policy"):
        place(CapacityState(uniform_topology(1, 1)), [], "random")


@pytest.mark.parametrize("policy", ALL)
def test_a_gang_restricted_to_some_nodes_lands_only_on_them_or_fails(policy):
    topo = uniform_topology(4, 2)
    names = [n.name for n in topo.nodes]
    allowed = frozenset(names[2:])
    got = place(CapacityState(topo), [GangRequest("a", 4, Demand.of(1, 1, 1), only_nodes=allowed)], policy)
    assert {topo.nodes[a.node].name for a in got.by_role()["a"]} <= allowed
    with pytest.raises(PlacementError, match="'a'"):  # 5 GPUs asked of the 4 the two allowed nodes have
        place(CapacityState(topo), [GangRequest("a", 5, Demand.of(1, 1, 1), only_nodes=allowed)], policy)
