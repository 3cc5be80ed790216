"""Queue mode: pods that do not fit wait, then run when capacity frees."""

from __future__ import annotations

import pytest

from kilorl.placement.alibaba import read_nodes, read_pods
from kilorl.placement.policies import POLICIES
from kilorl.placement.simulate import simulate

ONE_NODE = "sn,cpu_milli,memory_mib,gpu,model\na,16000,65536,2,T4\n"
HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"


@pytest.fixture
def blocked_head(tmp_path):
    """One 2-GPU node. p0 takes 1 GPU for 10 s; p1 needs both GPUs for 5 s; p2 takes 1 GPU for 3 s."""
    (tmp_path / "nodes.csv").write_text(ONE_NODE)
    (tmp_path / "pods.csv").write_text(HEAD + "p0,1000,1024,1,1000,0,10\np1,1000,1024,2,1000,1,6\np2,1000,1024,1,1000,2,5\n")
    return read_nodes(tmp_path / "nodes.csv"), read_pods(tmp_path / "pods.csv")


def run(trace, policy, discipline):
    topo, pods = trace
    # 4 GPUs asked on 2: target_load 2 submits the three pods once, in file order (the scenario needs it).
    return simulate(topo, pods, policy, mode="queue", target_load=2.0, discipline=discipline, order="file")


@pytest.mark.parametrize("policy", POLICIES)
def test_fifo_head_waits_for_capacity_and_blocks_the_pod_behind(blocked_head, policy):
    r = run(blocked_head, policy, "fifo")
    assert r.arrived == r.placed == 3 and r.failed == 0
    # p1 starts when p0 leaves (t=10) and holds both GPUs until 15; p2 then runs 15..18.
    assert r.extra["delay_s_p50"] == 10.0 and r.extra["delay_s_mean"] == pytest.approx(25 / 3, abs=0.05)
    assert r.extra["makespan_s"] == 18.0 and r.extra["drain_s"] == 15.0
    assert r.final_allocation_rate == 0.0
    assert max(s["queued"] for s in r.timeline) == 2


@pytest.mark.parametrize("policy", POLICIES)
def test_backfill_starts_the_small_pod_at_once(blocked_head, policy):
    r = run(blocked_head, policy, "backfill")
    # p2 runs 0..3 next to p0; p1 still waits for p0 (t=10) and ends at 15.
    assert r.extra["delay_s_p50"] == 0.0 and r.extra["delay_s_mean"] == pytest.approx(10 / 3, abs=0.05)
    assert r.extra["makespan_s"] == 15.0
    alloc = {s["time"]: s["allocation_rate"] for s in r.timeline}
    assert alloc[0.0] == 1.0 and alloc[3.0] == 0.5 and alloc[10.0] == 1.0 and alloc[15.0] == 0.0


def test_a_pod_no_node_can_hold_is_rejected_not_queued(tmp_path):
    (tmp_path / "nodes.csv").write_text(ONE_NODE)
    (tmp_path / "pods.csv").write_text(HEAD + "big,1000,1024,4,1000,0,10\np,1000,1024,1,1000,1,2\n")
    topo, pods = read_nodes(tmp_path / "nodes.csv"), read_pods(tmp_path / "pods.csv")
    r = simulate(topo, pods, "binpack-topo", mode="queue", target_load=2.5)
    assert r.rejected == ["big"] and r.placed == 1 and r.extra["delay_s_p99"] == 0.0


def test_queue_mode_needs_durations(tmp_path):
    (tmp_path / "nodes.csv").write_text(ONE_NODE)
    (tmp_path / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1000\n")
    topo, pods = read_nodes(tmp_path / "nodes.csv"), read_pods(tmp_path / "pods.csv")
    with pytest.raises(ValueError, match="deletion_time"):
        simulate(topo, pods, "fgd", mode="queue")
    with pytest.raises(ValueError, match="discipline"):
        simulate(topo, pods, "fgd", mode="queue", discipline="lifo")


def test_reserve_keeps_a_node_for_the_oldest_waiting_pod(tmp_path):
    """p0 holds 1 of 2 GPUs for 10 s, p1 needs both, p2 (1 GPU, 20 s) comes after p1."""
    (tmp_path / "nodes.csv").write_text(ONE_NODE)
    (tmp_path / "pods.csv").write_text(HEAD + "p0,1000,1024,1,1000,0,10\np1,1000,1024,2,1000,1,6\np2,1000,1024,1,1000,2,22\n")
    trace = read_nodes(tmp_path / "nodes.csv"), read_pods(tmp_path / "pods.csv")
    # backfill: p2 takes the free GPU at once and p1 waits for it too: p1 starts at 20.
    bf = run(trace, "binpack-topo", "backfill")
    assert bf.extra["delay_s_mean"] == pytest.approx(20 / 3, abs=0.05) and bf.extra["makespan_s"] == 25.0
    # reserve: p1's shadow time is 10 (p0 leaves); p2 (20 s) would end after it, so it waits;
    # p1 starts at 10, p2 at 15.
    rs = run(trace, "binpack-topo", "reserve")
    assert rs.extra["delay_s_mean"] == pytest.approx(25 / 3, abs=0.05) and rs.extra["makespan_s"] == 35.0
    assert rs.extra["drain_s"] == 15.0


@pytest.fixture
def reserved_head(tmp_path):
    """Nodes a (2 GPUs) then b (1 GPU). p0 1 GPU 10 s; p1 2 GPUs 5 s (fits on a only);
    p2 and p3 1 GPU 20 s; p4 1 GPU 3 s. All submitted at t = 0, in that order."""
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\na,16000,65536,2,T4\nb,16000,65536,1,T4\n")
    (tmp_path / "pods.csv").write_text(HEAD + "p0,1000,1024,1,1000,0,10\np1,1000,1024,2,1000,0,5\n"
                                       "p2,1000,1024,1,1000,0,20\np3,1000,1024,1,1000,0,20\np4,1000,1024,1,1000,0,3\n")
    return read_nodes(tmp_path / "nodes.csv"), read_pods(tmp_path / "pods.csv")


def test_reserve_lets_only_pods_that_end_by_the_shadow_time_onto_the_reserved_node(reserved_head):
    # p0 -> a; p1 waits, reserving a until p0 ends (shadow time 10). p2 (20 s) may not use a's
    # free GPU but takes b at once; p3 (20 s) waits; p4 (3 s, ends by 10) backfills onto a.
    # t=10: p1 starts on a (to 15); p3's reservation is a at 15, where it starts (to 35).
    # Delays: 0, 10, 0, 15, 0.
    rs = run(reserved_head, "first-fit", "reserve")
    assert rs.placed == 5 and rs.extra["never_started"] == 0
    assert rs.extra["delay_s_mean"] == pytest.approx(5.0) and rs.extra["drain_s"] == 15.0
    assert rs.extra["makespan_s"] == 35.0
    # Backfill without a reservation: p3 takes a's free GPU until 20, so p1 waits until 20.
    # p4 waits for p0 (10). Delays: 0, 20, 0, 0, 10.
    bf = run(reserved_head, "first-fit", "backfill")
    assert bf.extra["delay_s_mean"] == pytest.approx(6.0) and bf.extra["drain_s"] == 20.0
    assert bf.extra["makespan_s"] == 25.0

