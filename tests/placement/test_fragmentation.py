"""FGD's fragmentation arithmetic and gradient, on cases computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kilorl.placement import Demand, scoring, topology_from_dict
from kilorl.placement.fragmentation import (
    Workload,
    host_weights,
    leftover_gpus,
    node_fragmentation,
    ratio_stranding,
    sliver_floor,
    total_fragmentation,
)
from kilorl.placement.policies import MEASURE, choose_node
from kilorl.placement.scoring import FragScorer
from kilorl.placement.state import Allocation, CapacityState

HALF = Demand(1, 500, 1000, 1024)
WHOLE = Demand(1, 1000, 2000, 1024)
CPU_ONLY = Demand(0, 0, 1000, 1024)


def two_gpu_nodes(n: int) -> CapacityState:
    return CapacityState(topology_from_dict({
        "node_types": {"box": {"cpus": 4, "memory_gb": 16, "gpus": {"model": "T4", "count": 2, "memory_gb": 16}}},
        "node_groups": [{"type": "box", "count": n, "nodes_per_leaf": 8}],
    }))


def frag(wl: Workload, gpu: list[int], cpu: int, measure: str, mem: int = 1 << 20) -> float:
    return float(node_fragmentation(np.array([gpu]), np.array([cpu]), np.array([mem]), np.array([0]), wl, measure)[0])


@pytest.fixture
def mix() -> Workload:
    """p(HALF) = 1/2, p(WHOLE) = 1/4, p(CPU_ONLY) = 1/4."""
    return Workload.of([HALF, HALF, WHOLE, CPU_ONLY], ["T4"])


def test_fragmentation_of_one_node_by_hand(mix):
    # Free [1000, 300]: HALF and WHOLE fit on device 0 and cannot use device 1's 300 milli;
    # the paper counts every free GPU as a fragment for a CPU-only task.
    # 1/2 * 300 + 1/4 * 300 + 1/4 * 1300 = 550.
    assert frag(mix, [1000, 300], 4000, "paper") == pytest.approx(550)
    # The strand measure charges a CPU-only task nothing when it fits: 150 + 75 = 225.
    assert frag(mix, [1000, 300], 4000, "strand") == pytest.approx(225)


def test_a_task_that_does_not_fit_sees_every_free_gpu_as_fragment(mix):
    # 1500 milli CPU: HALF (1000) fits and strands 300; WHOLE (2000) does not: 1300.
    assert frag(mix, [1000, 300], 1500, "paper") == pytest.approx(0.5 * 300 + 0.25 * 1300 + 0.25 * 1300)
    # 500 milli CPU: nothing fits.
    assert frag(mix, [1000, 300], 500, "paper") == pytest.approx(1300)
    # Memory: ignored by the paper's measure, binding in the strand measure.
    assert frag(mix, [1000, 300], 4000, "paper", mem=512) == pytest.approx(550)
    # 512 MiB < the 1024 every type asks: nothing fits, not even the CPU-only task.
    assert frag(mix, [1000, 300], 4000, "strand", mem=512) == pytest.approx(1300)


def test_gpu_model_constraint_makes_the_node_all_fragment():
    v100_only = Demand(1, 500, 1000, 1024, frozenset({"V100"}))
    wl = Workload.of([v100_only], ["T4", "V100"])
    free, cpu, mem = np.array([[1000, 1000]] * 2), np.array([4000] * 2), np.array([1 << 20] * 2)
    f = node_fragmentation(free, cpu, mem, np.array([0, 1]), wl)  # node 0 is T4, node 1 V100
    assert f.tolist() == [2000.0, 0.0]


def test_gradient_prefers_the_node_and_device_it_unfragments():
    # One workload type: 600-milli tasks. Node 0 is empty, node 1 has [1000, 400] free,
    # whose 400 milli no 600-milli task can use: F = (0, 400).
    state = two_gpu_nodes(2)
    state.allocate(Allocation("x", 0, 1, (1,), 600, 0, 0))
    wl = Workload.of([Demand(1, 600, 1000, 1024)], state.model_names)
    scorer = FragScorer(wl, "paper")
    scorer.refresh(state)
    assert scorer.values.tolist() == [0.0, 400.0]
    ask = Demand(1, 400, 1000, 1024)
    # A 400-milli task on node 1 device 1 fills the fragment: F_1 400 -> 0, gradient -400.
    # On node 0 (either device) or node 1 device 0 it leaves 600 free: gradient 0.
    delta, device = scorer.gradient(state, ask, np.array([0, 1]))
    assert delta.tolist() == [0.0, -400.0] and device[1] == 1
    assert choose_node("fgd", state, ask, np.ones(2, dtype=bool), cache=scorer) == (1, 1)
    assert choose_node("first-fit", state, ask, np.ones(2, dtype=bool))[0] == 0


def test_cached_gradient_follows_the_node_that_changed():
    state = two_gpu_nodes(3)
    wl = Workload.of([Demand(1, 600, 1000, 1024)], state.model_names)
    scorer = FragScorer(wl, "paper")
    scorer.refresh(state)
    ask = Demand(1, 400, 1000, 1024)
    everywhere = np.arange(3)
    assert scorer.gradient(state, ask, everywhere)[0].tolist() == [0.0, 0.0, 0.0]
    state.allocate(Allocation("x", 0, 2, (0,), 600, 0, 0))  # node 2: [400, 1000] free
    scorer.refresh(state, [2])
    delta, device = scorer.gradient(state, ask, everywhere)
    assert delta.tolist() == [0.0, 0.0, -400.0] and device[2] == 0
    # The cache agrees with a scorer built from scratch on the new state.
    fresh = FragScorer(wl, "paper")
    fresh.refresh(state)
    np.testing.assert_array_equal(fresh.gradient(state, ask, everywhere)[0], delta)
    assert total_fragmentation(state, wl) == pytest.approx(0.4)


def test_sliver_floor_by_hand():
    def shared(milli: int) -> Demand:
        return Demand(1, milli, 1000, 1024)

    # Rooms <= 190: the 810-milli pods' 3 x 190, less the one 160-milli pod that can join: 410.
    # Rooms <= 350: those plus the 650-milli pods' 2 x 350, less the 160 and the 320: 790.
    placed = {shared(810): 3, shared(160): 1, shared(650): 2, shared(320): 1, WHOLE: 4}
    assert sliver_floor(placed) == pytest.approx(0.79)
    # With many small pods the tightest room size wins: 3 x 190 - 160 = 410 beats 1270 - 1120.
    assert sliver_floor({**placed, shared(320): 3}) == pytest.approx(0.41)
    # Pods of one share count together whatever their CPU ask: 3 x 190 - 160.
    assert sliver_floor({shared(810): 2, Demand(1, 810, 2000, 1024): 1, shared(160): 1}) == pytest.approx(0.41)
    assert sliver_floor({shared(400): 5, WHOLE: 1}) == 0.0


def test_leftover_gpus_says_which_tasks_could_use_the_idle_share():
    state = two_gpu_nodes(3)
    state.allocate(Allocation("big", 0, 1, (0, 1), 905, 0, 0))  # node 1: [95, 95] free
    state.allocate(Allocation("cpu", 0, 2, (), 0, 4000, 0))  # node 2: GPUs free, no CPU left
    wl = Workload.of([Demand(1, 810, 1000, 1024)] * 99 + [Demand(1, 50, 1000, 1024)], state.model_names)
    lo = leftover_gpus(state, wl)
    # Node 0 (2 GPUs) takes anything; node 1's 0.19 only the 1% of tasks asking 50 milli;
    # on node 2 nothing fits, though by GPU alone everything would.
    assert lo == {"free": 4.19, "no_task_fits": 2.0, "cpu_or_memory_short": 2.0, "only_rare_tasks_fit": 0.19,
                  "common_tasks_fit": 2.0}


def test_ratio_stranding_sends_cpu_work_where_cpu_is_plentiful():
    # Node 0: 2 GPUs, 24 cores; node 1: 2 GPUs, 64 cores. Workload: 1-GPU/8-core pods and
    # 8-core CPU-only pods, equally often: 16 cores per GPU.
    state = CapacityState(topology_from_dict({
        "node_types": {"lean": {"cpus": 24, "memory_gb": 64, "gpus": {"model": "T4", "count": 2}},
                       "rich": {"cpus": 64, "memory_gb": 64, "gpus": {"model": "T4", "count": 2}}},
        "node_groups": [{"type": "lean", "count": 1, "prefix": "a"}, {"type": "rich", "count": 1, "prefix": "b"}],
    }))
    gpu_pod, cpu_pod = Demand(1, 1000, 8000, 0), Demand(0, 0, 8000, 0)
    wl = Workload.of([gpu_pod, cpu_pod], state.model_names)
    assert wl.cpu_per_gpu == 16.0
    # Node 0 strands 2000 - 24000/16 = 500 milli; node 1 nothing.
    assert ratio_stranding(state.gpu_total, state.cpu_free, state.mem_free, wl).tolist() == [500.0, 0.0]
    everywhere = np.ones(2, dtype=bool)
    chosen = {}
    for policy in ("fgd", "binpack-topo"):
        scorer = FragScorer(wl, MEASURE[policy])
        scorer.refresh(state)
        chosen[policy] = choose_node(policy, state, cpu_pod, everywhere, cache=scorer)[0]
    # With 16 cores left node 0 still fits both 1-GPU pods, so FGD's gradient is 0 on both
    # nodes and it takes node 0; the ratio stranding there would grow by 500, so binpack-topo
    # takes node 1.
    assert chosen == {"fgd": 0, "binpack-topo": 1}


def small_and_one_big(small: int) -> CapacityState:
    """``small`` nodes of 2 GPUs and 16 cores, then one node of 8 GPUs and 128 cores."""
    gpus = {"model": "T4", "memory_gb": 16}
    return CapacityState(topology_from_dict({
        "node_types": {"small": {"cpus": 16, "memory_gb": 64, "gpus": {**gpus, "count": 2}},
                       "big": {"cpus": 128, "memory_gb": 1024, "gpus": {**gpus, "count": 8}}},
        "node_groups": [{"type": "small", "count": small, "prefix": "s"}, {"type": "big", "count": 1, "prefix": "b"}],
    }))


BIG = Demand(8, 1000, 120_000, 1024)
ONE = Demand(1, 1000, 1000, 1024)


def test_types_only_a_few_nodes_can_host_are_weighted_per_eligible_node():
    # 20 GPU nodes; BIG fits on 1 (< 10% of them): weight 20 / 1. ONE fits on all 20: weight 1.
    state = small_and_one_big(19)
    wl = Workload.of([ONE] * 99 + [BIG], state.model_names)
    weights = dict(zip((int(n) for n in wl.num_gpus), host_weights(wl, state.topology), strict=True))
    assert weights == {1: 1.0, 8: 20.0}
    # 9 small nodes + 1 big: BIG's host is 1 of 10 nodes, not fewer than 10%: weight 1.
    state10 = small_and_one_big(9)
    assert host_weights(Workload.of([ONE] * 99 + [BIG], state10.model_names), state10.topology).tolist() == [1.0, 1.0]


def test_rare_host_weight_makes_breaking_the_big_node_expensive():
    state = small_and_one_big(19)
    wl = Workload.of([ONE] * 99 + [BIG], state.model_names)  # p(BIG) = 0.01
    both = np.array([0, 19])  # a small node, the big node
    plain = FragScorer(wl, "strand")
    plain.refresh(state)
    delta, _ = plain.gradient(state, ONE, both)
    # Small node: BIG never fits there, its free 2000 -> 1000 milli: -1000 * 0.01 = -10.
    # Big node: BIG fits now (F = 0); after ONE, 7000 milli free that BIG cannot use: +70.
    assert delta.tolist() == pytest.approx([-10.0, 70.0])
    weighted = FragScorer(wl, "strand", rare_hosts=True)
    weighted.refresh(state)
    delta, _ = weighted.gradient(state, ONE, both)
    assert delta.tolist() == pytest.approx([-200.0, 1400.0])  # x 20


def test_unique_rows_groups_equal_rows_and_only_those():
    rng = np.random.default_rng(0)
    key = rng.integers(-1, 3, size=(500, 5))
    first, inverse = scoring.unique_rows(key)
    np.testing.assert_array_equal(key[first][inverse], key)  # every row maps to a row equal to it
    assert len(first) == len({tuple(r) for r in key.tolist()})  # and distinct rows stay apart


def test_scoring_many_rows_at_once_gives_each_row_its_own_fragmentation():
    # Over DEDUP_ROWS rows the scorer scores each distinct row once: same values as row by row.
    state = two_gpu_nodes(scoring.DEDUP_ROWS + 44)
    rng = np.random.default_rng(1)
    for node in range(len(state.cpu_free)):
        if rng.random() < 0.7:
            state.allocate(Allocation("x", 0, node, (int(rng.integers(2)),), int(rng.choice([300, 600, 1000])),
                                      int(rng.choice([0, 1000, 3000])), 0))
    wl = Workload.of([HALF, WHOLE, CPU_ONLY, Demand(1, 300, 1000, 1024)], state.model_names)
    scorer = FragScorer(wl, "strand")
    scorer.refresh(state)
    direct = node_fragmentation(state.gpu_free, state.cpu_free, state.mem_free, state.node_model, wl, "strand")
    np.testing.assert_allclose(scorer.values, direct)
    assert len(np.unique(direct)) > 3
