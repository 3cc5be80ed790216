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


SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}
TWO_POLICIES = {"policies": {"first": {}, "rest": {}}, "policy_mapping": {"agent_0": "first", "*": "rest"}}


def two_policies_on(first: list[str], rest: list[str]):
    small = {"cpus": 1, "memory_gb": 0.25}
    return tiny_config(env=SPREAD, multi_agent=TWO_POLICIES,
                       resources={"policies": {"first": {**small, "nodes": first}, "rest": {**small, "nodes": rest}}})


def test_each_policy_has_a_learner_role_of_its_own_planned_on_its_policys_nodes():
    topo = labelled(["a", "b", "c"])
    placed = plan(two_policies_on(["zone=c"], ["zone=a"]), topo).by_role()
    assert "learner" not in placed
    assert [topo.nodes[a.node].name for a in placed["learner/first"]] == [topo.nodes[2].name]
    assert [topo.nodes[a.node].name for a in placed["learner/rest"]] == [topo.nodes[0].name]


def test_a_policys_label_no_node_has_is_refused_naming_the_policy_and_the_label():
    with pytest.raises(PlacementError, match=r"'learner/rest'.*no node has the label 'zone=mars' "
                                             r"\(resources\.policies\.rest\.nodes\)"):
        plan(two_policies_on(["zone=a"], ["zone=mars"]), labelled(["a", "b"]))


def test_resources_for_a_policy_the_run_does_not_have_are_refused():
    from kilorl.config import ConfigError

    with pytest.raises(ConfigError, match=r"resources.policies: \['ghost'\] are not in multi_agent.policies"):
        tiny_config(env=SPREAD, multi_agent=TWO_POLICIES, resources={"policies": {"ghost": {}}})
