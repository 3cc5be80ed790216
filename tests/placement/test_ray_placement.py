"""The Ray layer: a placement becomes placement groups pinned to the planned nodes."""

from __future__ import annotations

import pytest

from kilorl.placement import Affinity, CapacityState, Demand, GangRequest, place, topology_from_dict
from kilorl.placement.ray_placement import (
    RayPlacementError,
    create_placement_groups,
    node_affinity_strategies,
    node_resource,
    placement_group_specs,
    ray_node_ids,
    ray_node_resources,
    scheduling_strategy,
)

TWO_NODES = {
    "name": "two",
    "node_types": {"box": {"cpus": 2, "memory_gb": 1, "gpus": {"model": "T4", "count": 2, "islands": "all"}}},
    "node_groups": [{"type": "box", "count": 2, "prefix": "n", "nodes_per_leaf": 2}],
}
REQUESTS = [
    GangRequest("learner", 2, Demand.of(1, 0.5, 0.1), (Affinity("same_island"),), collective=True),
    GangRequest("ps", 1, Demand.of(0, 0.5, 0.1), (Affinity("near_role", role="learner"),)),
    GangRequest("actor", 2, Demand.of(0.5, 0.5, 0.1)),
]


def _placement(topology_dict=TWO_NODES):
    return place(CapacityState(topology_from_dict(topology_dict)), REQUESTS, "binpack-topo")


def test_bundle_specs_pin_every_instance():
    p = _placement()
    specs = placement_group_specs(p)
    learner = specs["learner"]
    assert learner.nodes == ["n0000", "n0000"]
    # 0.1 GiB rounded up to MiB
    assert learner.bundles[0] == {node_resource("n0000"): 0.001, "CPU": 0.5, "GPU": 1.0, "memory": 103.0 * 1024**2}
    assert specs["actor"].nodes == ["n0001", "n0001"] and specs["actor"].bundles[0]["GPU"] == 0.5
    assert specs["ps"].nodes == ["n0000"] and "GPU" not in specs["ps"].bundles[0]
    assert ray_node_resources(p.state.topology)["n0001"] == {"kilorl_node_n0001": 1000.0}


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from kilorl.trainer.ray_start import start_local_cluster

    cluster = start_local_cluster({"num_cpus": 0, "object_store_memory": 80 << 20},
                                  [{"num_cpus": 2, "num_gpus": 2, "memory": 1 << 30, "object_store_memory": 80 << 20,
                                    "resources": res} for res in ray_node_resources(topology_from_dict(TWO_NODES)).values()])
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield ray
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_placement_groups_land_on_planned_nodes(ray_cluster):
    ray = ray_cluster
    from ray.util import remove_placement_group

    p = _placement()
    groups = create_placement_groups(p, timeout_s=60)
    try:
        ids = ray_node_ids()
        assert set(ids) == {"n0000", "n0001"}

        @ray.remote(num_cpus=0.5)
        def where():
            return ray.get_runtime_context().get_node_id(), ray.get_gpu_ids()

        for role, spec in placement_group_specs(p).items():
            for i, node in enumerate(spec.nodes):
                gpus = spec.bundles[i].get("GPU", 0)
                got_node, got_gpus = ray.get(
                    where.options(scheduling_strategy=scheduling_strategy(groups, role, i), num_gpus=gpus,
                                  memory=int(spec.bundles[i]["memory"])).remote(), timeout=60)
                assert got_node == ids[node], (role, i)
                assert len(got_gpus) == (1 if gpus else 0)
        strategies = node_affinity_strategies(p)
        assert [s.node_id for s in strategies["actor"]] == [ids["n0001"]] * 2
    finally:
        for g in groups.values():
            remove_placement_group(g)


@pytest.mark.slow
def test_unreservable_placement_leaves_nothing_reserved(ray_cluster):
    from ray.util import placement_group_table

    # The plan believes n0001 has 4 GPUs; its raylet has 2, so the actor group cannot be reserved.
    bigger = {**TWO_NODES, "node_types": {"box": {**TWO_NODES["node_types"]["box"],
                                                   "gpus": {"model": "T4", "count": 4, "islands": "all"}}}}
    reqs = [GangRequest("big", 2, Demand.of(2, 0.5, 0.1))]
    p = place(CapacityState(topology_from_dict(bigger)), reqs, "first-fit")
    assert {a.node for a in p.allocations} == {0}
    with pytest.raises(RayPlacementError, match="not ready"):
        create_placement_groups(p, timeout_s=3)
    states = [g["state"] for g in placement_group_table().values()]
    assert "PENDING" not in states and "CREATED" not in states
    ghost = {**TWO_NODES, "node_groups": [{"type": "box", "count": 1, "prefix": "ghost"}]}
    with pytest.raises(RayPlacementError, match="no live Ray node declares kilorl_node_ghost0000"):
        one = [GangRequest("big", 1, Demand.of(2, 0.5, 0.1))]
        create_placement_groups(place(CapacityState(topology_from_dict(ghost)), one, "first-fit"))
