"""Trace simulation on real rows of the Alibaba v2023 trace (fixtures/alibaba_mini_*)."""

from __future__ import annotations

import json

import pytest

from kilorl.cli.main import main
from kilorl.placement import uniform_topology
from kilorl.placement.alibaba import TraceError, read_nodes, read_pods
from kilorl.placement.fragmentation import Workload
from kilorl.placement.simulate import SIM_POLICIES, PodScheduler, simulate, simulate_jobs
from kilorl.placement.state import CapacityState
from kilorl.placement.synthetic import rl_job_mix


@pytest.fixture
def mini(fixtures):
    return read_nodes(fixtures / "alibaba_mini_nodes.csv", nodes_per_leaf=8), read_pods(fixtures / "alibaba_mini_pods.csv")


def test_readers(mini):
    topo, pods = mini
    assert len(topo.nodes) == 31 and len(topo.leaves) == 4
    first = topo.nodes[0]
    assert first.cpus == 64 and first.memory_gb == 256 and len(first.gpus) == 2
    assert [p.creation for p in pods] == sorted(p.creation for p in pods)
    shared = [p for p in pods if p.demand.shared]
    assert shared and all(0 < p.demand.gpu_milli < 1000 for p in shared)
    assert any(p.demand.num_gpus == 0 for p in pods) and any(p.demand.num_gpus == 8 for p in pods)


@pytest.mark.parametrize("policy", SIM_POLICIES)
def test_fill_mode_invariants(mini, policy):
    topo, pods = mini
    res = simulate(topo, pods, policy, mode="fill", target_load=1.2)
    assert res.placed + res.failed == res.arrived == len(res.latencies_us)
    assert len(res.rejected) == res.failed
    assert 0 < res.final_allocation_rate <= 1
    loads = [s["arrived_load"] for s in res.timeline]
    # The resized list stops at the last pod that keeps the demand under 120%.
    assert loads == sorted(loads) and loads[-1] == pytest.approx(1.2, abs=0.02)
    assert res.saturated_allocation_rate() is not None
    assert len(res.latencies_us) == res.arrived


def test_no_device_is_oversubscribed_and_shares_add_up(mini):
    topo, pods = mini
    state = CapacityState(topo)
    sched = PodScheduler(state, "binpack-topo", Workload.of([p.demand for p in pods], state.model_names))
    placed = [a for a in (sched.try_place(p) for p in pods) if a is not None]
    assert (state.gpu_free[state.gpu_free != -1] >= 0).all() and (state.cpu_free >= 0).all()
    used = sum(len(a.gpus) * a.gpu_milli for a in placed)
    assert used == state.allocated_gpu_milli
    for a in reversed(placed):
        sched.release(a)
    assert state.allocated_gpu_milli == 0
    assert sched.fragmentation_gpus() == pytest.approx(
        float(sched.report.values.sum()) / 1000)


def test_gpu_spec_constraint_is_honoured(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,2,T4\nb,64000,262144,2,V100M32\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
                    "p0,1000,1024,1,500,V100M32|V100M16,0,10\np1,1000,1024,1,1000,V100M32,1,10\n"
                    "p2,1000,1024,1,1000,V100M32,2,10\np3,1000,1024,1,1000,,3,10\n")
    topo, trace = read_nodes(nodes), read_pods(pods)
    for policy in SIM_POLICIES:
        state = CapacityState(topo)
        sched = PodScheduler(state, policy, Workload.of([p.demand for p in trace], state.model_names))
        allocs = [sched.try_place(p) for p in trace]
        assert allocs[0] is not None and allocs[0].node == 1 and allocs[1].node == 1
        assert allocs[2] is None or allocs[2].node == 1  # only V100M32 devices qualify
        assert allocs[3] is not None


def test_replay_mode_releases_everything(mini):
    topo, pods = mini
    res = simulate(topo, pods, "first-fit", mode="replay")
    assert res.arrived == len(pods) and res.final_allocation_rate == 0.0
    assert res.extra["peak_allocation_rate"] > 0


def test_trace_errors_name_line_and_column(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n")
    with pytest.raises(TraceError, match="missing column.*gpu_milli"):
        read_pods(bad)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,x,100\n")
    with pytest.raises(TraceError, match=r"pods.csv:2: column 'num_gpu' must be a number"):
        read_pods(bad)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n")
    with pytest.raises(TraceError, match="whole devices only"):
        read_pods(bad)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np,1,1,1,100,9,3\n")
    with pytest.raises(TraceError, match="before creation_time"):
        read_pods(bad)


def test_synthetic_rl_jobs_are_gangs():
    topo = uniform_topology(8, 8, nodes_per_leaf=4)
    jobs = rl_job_mix(40, seed=3, mean_interarrival_s=20)
    assert jobs == rl_job_mix(40, seed=3, mean_interarrival_s=20)
    res = {p: simulate_jobs(topo, jobs, p) for p in ("binpack-topo", "spread")}
    for r in res.values():
        assert r.placed + r.failed == 40 and r.final_allocation_rate == 0.0
        assert 0 < r.extra["peak_allocation_rate"] <= 1
    assert res["binpack-topo"].extra["mean_allreduce_ms"] < res["spread"].extra["mean_allreduce_ms"]


def test_sched_cli(fixtures, capsys, tmp_path, repo):
    args = ["sched", "simulate", "--nodes", str(fixtures / "alibaba_mini_nodes.csv"),
            "--trace", str(fixtures / "alibaba_mini_pods.csv"), "--seeds", "42,43"]
    assert main(args + ["--policy", "first-fit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["policy"], r["seed"], r["order"]) for r in out["results"]] == [("first-fit", 42, "shuffled"),
                                                                             ("first-fit", 43, "shuffled")]
    assert out["results"][0]["timeline"] and len(out["results"][0]["curve"]) == 131
    assert main(args + ["--policy", "paper,binpack-topo"]) == 0
    table = capsys.readouterr().out
    assert all(f"\n{p} " in table for p in ("random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit",
                                            "fgd-paper", "binpack-topo")) and " ± " in table
    assert main(args[:-2] + ["--seeds", "42", "--order", "file", "--policy", "fgd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["order"] == "file"
    assert main(args[:-2] + ["--seeds", "x"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(args + ["--mode", "replay", "--policy", "pack"]) == 0
    assert "pack" in capsys.readouterr().out
    assert main(args + ["--mode", "queue", "--discipline", "backfill", "--policy", "fgd", "--json"]) == 0
    queued = json.loads(capsys.readouterr().out)["results"][0]
    assert queued["discipline"] == "backfill" and queued["placed"] + queued["failed"] == queued["arrived"]
    assert main(["sched", "simulate", "--cluster", str(repo / "examples/clusters/heterogeneous.yaml"),
                 "--synthetic-jobs", "20", "--policy", "binpack-topo"]) == 0
    assert "mean_allreduce_ms" in capsys.readouterr().out
    assert main(args + ["--policy", "nope"]) == 2
    assert "allowed" in capsys.readouterr().err
    assert main(["sched", "simulate", "--trace", str(tmp_path / "x.csv")]) == 2
