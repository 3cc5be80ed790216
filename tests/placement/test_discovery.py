"""Discovery: NVML answers replayed from recordings, and the real CPU path on this machine."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from kilorl.cli.main import main
from kilorl.placement.discovery import discover, read_gpus, read_numa, read_rdma, render
from kilorl.placement.nvml import NvmlUnavailable, PynvmlSource, RecordedSource, record
from kilorl.placement.probe import gpu_copy_gbps, host_memcpy_gbps


def test_dgx_h100_recording_is_one_nvswitch_island(recording):
    gpus, links, status = read_gpus(RecordedSource(recording("nvml_dgx_h100.json")))
    assert status == "8 GPU(s), NVIDIA driver 535.129.03"
    assert [g.island for g in gpus] == [0] * 8
    assert all(links[i][j] == "NV" for i in range(8) for j in range(8) if i != j)
    assert [links[i][i] for i in range(8)] == ["X"] * 8
    assert gpus[0].memory_gb == pytest.approx(79.65, abs=0.01)
    assert [g.numa for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_bridged_pcie_recording_has_two_islands_and_sys_between(recording):
    gpus, links, _ = read_gpus(RecordedSource(recording("nvml_pcie_a100_bridged.json")))
    assert [g.island for g in gpus] == [0, 0, 1, 1]
    assert links[0][1] == "NV" and links[2][3] == "NV"
    assert links[0][2] == "SYS" and links[1][3] == "SYS"


def test_pcie_only_recording_maps_nvml_levels(recording):
    gpus, links, _ = read_gpus(RecordedSource(recording("nvml_pcie_t4.json")))
    assert [g.island for g in gpus] == [0, 1, 2]
    assert links[0][1] == "PIX" and links[0][2] == "PHB"
    assert gpus[0].numa is None


def test_failed_init_is_reported_plainly(recording):
    gpus, links, status = read_gpus(RecordedSource(recording("nvml_no_driver.json")))
    assert gpus == [] and links == []
    assert status == "no GPU found (NVML could not start: Driver Not Loaded)"


def test_recording_round_trip(recording):
    data = recording("nvml_pcie_a100_bridged.json")
    assert record(RecordedSource(data)) == data


def test_recording_format_is_checked():
    with pytest.raises(ValueError, match="not an NVML recording"):
        RecordedSource({"devices": []})


def test_discovered_host_becomes_a_scheduler_node(recording, tmp_path):
    host = discover(RecordedSource(recording("nvml_dgx_h100.json")), sys_root=tmp_path, probe=False)
    node = host.to_node()
    assert len(node.gpus) == 8 and node.islands == {0: tuple(range(8))}
    assert node.gpus[0].model == "NVIDIA H100 80GB HBM3"
    text = render(host)
    assert "gpu7" in text and "NV" in text


def test_real_cpu_path_on_this_machine():
    host = discover(probe=True)
    assert host.logical_cpus == os.cpu_count()
    assert host.memory_gb == pytest.approx(psutil.virtual_memory().total / 1024**3, rel=0.01)
    assert host.numa and host.numa[0].cpus
    try:
        n = PynvmlSource()
        n.open()
        has_gpu = n.device_count() > 0
        n.close()
    except NvmlUnavailable:
        has_gpu = False
    if has_gpu:
        assert host.gpus and host.gpu_links
        assert host.probes["gpu_copy"]["status"] == "ok", host.probes["gpu_copy"]
    else:
        assert host.gpus == [] and host.gpu_status.startswith("no GPU found")
        assert host.probes["gpu_copy"]["status"].startswith("skipped")
        assert "no GPU found" in render(host)
    assert host.probes["host_memcpy"]["median_gbps"] > 0


def test_numa_and_rdma_from_a_sysfs_tree(tmp_path):
    node1 = tmp_path / "node" / "node1"
    node1.mkdir(parents=True)
    (node1 / "cpulist").write_text("8-15\n")
    (node1 / "meminfo").write_text("Node 1 MemTotal:       16777216 kB\nNode 1 MemFree: 1 kB\n")
    (tmp_path / "node" / "node0").mkdir()
    (tmp_path / "node" / "node0" / "cpulist").write_text("0-7\n")
    doms = read_numa(tmp_path / "node")
    assert [(d.id, d.cpus, d.memory_gb) for d in doms] == [(0, "0-7", None), (1, "8-15", 16.0)]
    port = tmp_path / "ib" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    rdma = read_rdma(tmp_path / "ib")
    assert rdma[0].name == "mlx5_0" and rdma[0].ports[0]["rate"].startswith("400 Gb/sec")
    assert read_rdma(tmp_path / "absent") == []


def test_probes():
    hm = host_memcpy_gbps(nbytes=4 << 20, repeats=3)
    assert hm["median_gbps"] > 0 and hm["best_gbps"] >= hm["median_gbps"]
    gc = gpu_copy_gbps(nbytes=1 << 20, repeats=2)
    assert gc["status"] == "ok" or gc["status"].startswith(("skipped", "error"))


def test_topo_cli_json_and_recording(fixtures, tmp_path, capsys):
    assert main(["topo", "--json", "--no-probe", "--nvml-recording", str(fixtures / "nvml_pcie_a100_bridged.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["gpus"]) == 4 and out["gpu_links"][0][1] == "NV"
    rec = tmp_path / "rec.json"
    assert main(["topo", "--no-probe", "--record-nvml", str(rec)]) == 0
    saved = json.loads(rec.read_text())
    assert saved["format"] == "kilorl-nvml-recording/1"
    text = capsys.readouterr().out
    assert "cpu" in text and "memory" in text
    assert main(["topo", "--nvml-recording", str(tmp_path / "missing.json")]) == 2


def test_pynvml_source_uses_only_names_the_library_has():
    """Guards the real adapter against API drift: every pynvml name it calls exists."""
    import inspect
    import re

    import pynvml

    from kilorl.placement import nvml

    used = set(re.findall(r"(?:nv|_nv)\.(nvml\w+|NVML\w+)", inspect.getsource(nvml.PynvmlSource)))
    used |= set(re.findall(r"pynvml\.(nvml\w+|NVML\w+)", inspect.getsource(nvml.PynvmlSource)))
    assert {"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlInit"} <= used
    missing = sorted(n for n in used if not hasattr(pynvml, n))
    assert missing == []
