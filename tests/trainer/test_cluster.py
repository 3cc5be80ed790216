"""The user's Cluster handle: described and attached clusters, backend selection and its errors."""

from __future__ import annotations

import pytest

from kilorl.config import config_from_dict, load_config
from kilorl.trainer.cluster import Cluster, ClusterError, local_backends
from tests.conftest import EXAMPLES

SEED = {
    "env": {"id": "CartPole-v1"},
    "algo": {"rollout_length": 128, "num_minibatches": 32},
    "parallelism": {"parameter_server": 16, "learner": 32, "actor": 80},
    "train": {"gradient_accumulation_steps": 4, "pipeline_depth": 8, "overlap_compute_comm": True,
              "mixed_precision": "bf16"},
    "resources": {"learner": {"gpus": 1}, "actor": {"gpus": 0.5}},
}


def test_described_cluster_lists_nodes_devices_links_and_placed_roles():
    cfg = config_from_dict(SEED)
    desc = Cluster(nodes=128, gpus_per_node=8).describe(cfg)
    assert desc.kind == "described" and desc.backend == "nccl"
    assert len(desc.nodes) == 128 and all(len(n["gpus"]) == 8 for n in desc.nodes)
    assert desc.nodes[0]["islands"] == [list(range(8))]
    assert {"NVLINK", "NET"} <= set(desc.links)
    assert {role: len(where) for role, where in desc.roles.items()} == {"learner": 32, "parameter_server": 16, "actor": 80}
    # 32 one-GPU learners in 8-GPU NVLink islands: exactly 4 nodes.
    assert len(set(desc.roles["learner"])) == 4
    text = desc.render()
    assert "128x8xH100 (described), backend nccl" in text and "learner: 32 on 4 node(s)" in text


def test_described_cluster_without_gpus_defaults_to_gloo_and_rejects_bad_sizes():
    assert Cluster(nodes=2, gpus_per_node=0).describe().backend == "gloo"
    with pytest.raises(ClusterError, match="nodes=0"):
        Cluster(nodes=0, gpus_per_node=8)
    with pytest.raises(ClusterError, match="gpus_per_node=-1"):
        Cluster(nodes=1, gpus_per_node=-1)


def test_attached_cluster_reads_rays_real_resources(ray_local):
    desc = Cluster().describe()
    assert desc.kind == "attached"
    total_cpus = sum(n["cpus"] for n in desc.nodes)
    assert total_cpus == ray_local.cluster_resources()["CPU"]
    assert len(desc.nodes) == len([n for n in ray_local.nodes() if n["Alive"]])
    assert desc.backend in local_backends()


def test_unknown_backend_is_an_error_listing_the_available_ones():
    with pytest.raises(ClusterError, match=r"'mxlink' is not available; .*gloo"):
        Cluster(nodes=128, gpus_per_node=8, communication_backend="mxlink")
    with pytest.raises(ClusterError, match=r"'mxlink' is not available; usable on this machine: .*gloo"):
        Cluster(communication_backend="mxlink")


def test_backend_selection():
    assert Cluster().backend_for("cpu") == "gloo"
    assert Cluster(communication_backend="gloo").backend_for("cpu") == "gloo"
    if "nccl" not in local_backends():  # a CPU machine: nccl cannot run here, but can be planned
        with pytest.raises(ClusterError, match="'nccl' is not available; usable on this machine"):
            Cluster(communication_backend="nccl")
        assert Cluster(nodes=2, gpus_per_node=8, communication_backend="nccl").describe().backend == "nccl"
    else:
        assert Cluster().backend_for("cuda") == "nccl"


def test_seed_configuration_validates_as_written_and_plans_on_128_by_8():
    cfg = config_from_dict(SEED)
    assert cfg.train.pipeline_depth == 8 and cfg.train.overlap_compute_comm and cfg.train.mixed_precision == "bf16"
    placement = Cluster(nodes=128, gpus_per_node=8).plan(cfg)
    assert {r: len(a) for r, a in placement.by_role().items()} == {"learner": 32, "parameter_server": 16, "actor": 80}
    example = load_config(EXAMPLES / "plan_1024.yaml")
    assert example.train.gradient_accumulation_steps == 4 and example.parallelism.learner == 32
    assert len(Cluster(nodes=128, gpus_per_node=8).plan(example).by_role()["learner"]) == 32
