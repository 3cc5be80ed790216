"""Per-role node labels: ``resources.<role>.nodes`` keeps a role on the nodes that carry them."""

from __future__ import annotations

import dataclasses

import pytest

from kilorl.placement import PlacementError, uniform_topology
from kilorl.trainer.planning import nodes_with_labels, plan
from tests.conftest import tiny_config


def labelled(zones: list[str]):
    topo = uniform_topology(len(zones), 0)
    nodes = tuple(dataclasses.replace(n, labels=(("tier", "spot"), ("zone", z))) for n, z in zip(topo.nodes, zones))
    return dataclasses.replace(topo, nodes=nodes)


def test_a_role_asking_for_labels_is_planned_only_on_nodes_that_have_them_all():
    topo = labelled(["a", "b", "c"])
    cfg = tiny_config(parallelism={"actor": 3},
                      resources={"actor": {"cpus": 1, "memory_gb": 0.25, "nodes": ["zone=b", "tier"]}})
    placed = plan(cfg, topo)
    assert {topo.nodes[a.node].name for a in placed.by_role()["actor"]} == {topo.nodes[1].name}
    assert nodes_with_labels("actor", [], topo) is None  # no labels: any node


def test_a_label_no_node_has_is_refused_naming_the_role_the_field_and_the_label():
    topo = labelled(["a", "b"])
    with pytest.raises(PlacementError, match=r"'learner'.*no node has the label 'zone=mars' \(resources\.learner\.nodes\)"):
        nodes_with_labels("learner", ["zone=mars"], topo)
    with pytest.raises(PlacementError, match=r"no node has all of the labels \['zone=a', 'zone=b'\]"):
        nodes_with_labels("actor", ["zone=a", "zone=b"], topo)
