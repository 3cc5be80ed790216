"""Topology YAML: the shipped examples parse, and every mistake names its field."""

from __future__ import annotations

import copy

import pytest
import yaml

from kilorl.placement import LinkClass, TopologyError, load_topology, topology_from_dict, uniform_topology


def test_shipped_1024_h100_example(repo):
    topo = load_topology(repo / "examples/clusters/1024xH100.yaml")
    assert len(topo.nodes) == 128 and topo.total_gpus == 1024
    assert len(topo.leaves) == 8  # 16 nodes per leaf
    assert {n.leaf for n in topo.nodes[:16]} == {"leaf-0"} and topo.nodes[16].leaf == "leaf-1"
    node = topo.nodes[0]
    assert node.islands == {0: tuple(range(8))}
    assert node.gpu_link(0, 7) is LinkClass.NVLINK
    assert node.rails == 8 and all(n.rdma for n in node.nics)
    assert topo.spec(LinkClass.NVLINK).bandwidth_gbps == 450


def test_shipped_heterogeneous_example(repo):
    topo = load_topology(repo / "examples/clusters/heterogeneous.yaml")
    models = {g.model for n in topo.nodes for g in n.gpus}
    assert models == {"H100", "A100", "L4"}
    a100 = next(n for n in topo.nodes if n.name.startswith("a100"))
    assert a100.gpu_link(0, 1) is LinkClass.NVLINK  # bridged pair
    assert a100.gpu_link(0, 2) is LinkClass.SYS  # across NUMA domains
    cpu = next(n for n in topo.nodes if n.name == "cpu-0")
    assert cpu.gpus == () and cpu.failure_domain == "leaf-edge"
    assert next(n for n in topo.nodes if n.name == "cpu-4").failure_domain == "rack-b"
    assert topo.spine_oversubscription == 2.0


def test_link_classes_inside_a_node(small_topology_dict):
    topo = topology_from_dict(small_topology_dict)
    n = topo.nodes[0]
    assert n.gpu_link(0, 1) is LinkClass.NVLINK
    assert n.gpu_link(1, 2) is LinkClass.SYS
    assert topo.link(0, 0, 1, 0) is LinkClass.NET
    same_leaf = topo.net_spec(topo.nodes[0], topo.nodes[1])
    cross = topo.net_spec(topo.nodes[0], topo.nodes[2])
    assert same_leaf.bandwidth_gbps == 25 and cross.latency_us > same_leaf.latency_us


def _err(data) -> str:
    with pytest.raises(TopologyError) as info:
        topology_from_dict(data, "t.yaml")
    return str(info.value)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["node_types"]["box"].update(cpus="many"), "node_types.box.cpus"),
        (lambda d: d["node_types"]["box"].update(cpu=3), "node_types.box.cpu: unknown field"),
        (lambda d: d["node_types"]["box"]["gpus"].update(count=0), "node_types.box.gpus.count"),
        (lambda d: d["node_types"]["box"]["gpus"].update(islands=[[0, 9]]), "GPU index 9 out of range"),
        (lambda d: d["node_types"]["box"]["gpus"].update(numa=[[0, 1], [1, 2, 3]]), "listed twice"),
        (lambda d: d["node_types"]["box"]["gpus"].update(pcie_switches=[[0, 1]]), "GPUs [2, 3] are in no group"),
        (lambda d: d["node_groups"][0].update(type="bx"), "node_groups[0].type: unknown node type 'bx' (did you mean 'box'?)"),
        (lambda d: d.update(links={"NVL2": {"bandwidth_gbps": 1, "latency_us": 1}}), "links.NVL2: unknown link class"),
        (lambda d: d.update(links={"NET": {"bandwidth_gbps": -1, "latency_us": 1}}), "links.NET.bandwidth_gbps"),
        (lambda d: d["network"].update(spine_oversubscription=0.5) if "network" in d
         else d.update(network={"spine_oversubscription": 0.5}),
         "network.spine_oversubscription"),
        (lambda d: d["node_types"]["box"]["nics"][0].update(numa=5), "nics[0].numa=5"),
        (lambda d: d.pop("node_types"), "node_types: required field is missing"),
        (lambda d: d.update(node_groups=[]), "no nodes"),
        (lambda d: d.update(nodes=[{"name": "n0000", "type": "cpu"}]), "duplicate node name 'n0000'"),
    ],
)
def test_errors_name_the_field(small_topology_dict, mutate, expected):
    data = copy.deepcopy(small_topology_dict)
    mutate(data)
    msg = _err(data)
    assert expected in msg, msg
    assert msg.startswith("invalid topology t.yaml")


def test_file_errors(tmp_path):
    with pytest.raises(TopologyError, match="not found"):
        load_topology(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_topology(bad)
    top = tmp_path / "list.yaml"
    top.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(TopologyError, match="top level must be a mapping"):
        load_topology(top)


def test_uniform_topology_shape():
    topo = uniform_topology(32, 4, nodes_per_leaf=8)
    assert topo.total_gpus == 128 and len(topo.leaves) == 4
    assert topo.nodes[0].gpu_link(0, 3) is LinkClass.NVLINK
    assert uniform_topology(2, 4, nvlink=False).nodes[0].gpu_link(0, 3) is LinkClass.SYS
