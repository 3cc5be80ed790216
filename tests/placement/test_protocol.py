"""The FGD authors' protocol (shuffled, resized arrivals; the 1% curve) and the paper's baselines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kilorl.placement import uniform_topology
from kilorl.placement.alibaba import TracePod, read_nodes, read_pods
from kilorl.placement.baselines import PUBLISHED_NAMES, PaperChooser, tie_rank
from kilorl.placement.fragmentation import Workload
from kilorl.placement.protocol import CurvePoints, allocation_curve, arrival_sequence, read_published
from kilorl.placement.requests import Demand
from kilorl.placement.simulate import simulate
from kilorl.placement.state import Allocation, CapacityState

REPO = Path(__file__).resolve().parents[2]
DATA = next((b / "shared/data/alibaba-gpu-v2023" for b in (REPO.parent, REPO.parent.parent)
             if (b / "shared/data/alibaba-gpu-v2023/fgd_published_allocation.csv").is_file()), None)
needs_data = pytest.mark.skipif(DATA is None, reason="../shared/data/alibaba-gpu-v2023 is not beside the checkout")


def pods(*shares: int) -> list[TracePod]:
    return [TracePod(f"p{i:03d}", Demand(1, s, 1000, 1024), float(i), None) for i, s in enumerate(shares)]


def test_shuffled_order_is_a_seeded_permutation_topped_up_to_the_target():
    trace = pods(*([500] * 10 + [1000] * 10))  # 15 GPUs asked
    a = arrival_sequence(trace, 20_000, 1.3, "shuffled", seed=42)
    assert a == arrival_sequence(trace, 20_000, 1.3, "shuffled", seed=42)
    assert [p.name for p in a] != [p.name for p in arrival_sequence(trace, 20_000, 1.3, "shuffled", seed=43)]
    # Every pod of the list first, in a shuffled order; then draws until the next would pass 26 GPUs.
    assert sorted(p.name for p in a[:20]) == [p.name for p in trace] and [p.name for p in a[:20]] != [p.name for p in trace]
    asked = sum(p.demand.total_gpu_milli for p in a)
    assert 26_000 - 1000 < asked <= 26_000


def test_shuffled_order_trims_a_list_that_asks_more_than_the_target():
    trace = pods(*([1000] * 40))
    a = arrival_sequence(trace, 20_000, 1.3, "shuffled", seed=7)
    assert len(a) == 26 and len({p.name for p in a}) == 26


def test_file_order_repeats_the_list_until_the_target():
    trace = pods(1000, 500)
    a = arrival_sequence(trace, 4_000, 1.0, "file")
    assert [p.name for p in a] == ["p000", "p001", "p000", "p001", "p000"]
    with pytest.raises(ValueError, match="order"):
        arrival_sequence(trace, 4_000, 1.0, "sorted")


def test_curve_averages_the_samples_of_each_percent_and_borrows_neighbours_for_empty_ones():
    # Capacity 1000 milli: arrivals at 10 milli (1%), 14 (1%), 30 (3%); allocation 10, 12, 20.
    c = allocation_curve(np.array([10, 14, 30]), np.array([10, 12, 20]), 1000, top=4)
    assert c[1] == pytest.approx(1.1) and c[3] == pytest.approx(2.0)
    assert c[2] == pytest.approx((1.0 + 1.2 + 2.0) / 3)  # no sample of its own: 1..3%
    assert c[0] == pytest.approx(1.1) and c[4] == pytest.approx(2.0)
    pts = CurvePoints.of(np.r_[np.zeros(100), [90.0, 91.0, np.nan]], top=102)
    assert (pts.at100, pts.at130, pts.saturation) == (90.0, 91.0, 90.5)


def test_typical_workload_keeps_the_commonest_specs_up_to_95_percent_and_ignores_memory():
    ds = [Demand(1, 500, 1000, 1024)] * 50 + [Demand(1, 500, 1000, 4096)] * 45 + [Demand(0, 0, 2000, 1)] * 4 \
        + [Demand(8, 1000, 64000, 1)]
    wl = Workload.typical(ds, ["T4"])
    # (500, 1 CPU) counts 95 of 100 pods once memory is left out: it alone reaches 95%.
    assert len(wl.prob) == 1 and wl.prob[0] == pytest.approx(1.0) and wl.mem_mib[0] == 0
    assert len(Workload.typical(ds, ["T4"], share=0.99).prob) == 2


def test_tie_order_is_a_seeded_permutation_not_the_node_index():
    topo = uniform_topology(16, 8)
    firsts = set()
    for seed in (42, 43, 44):
        state = CapacityState(topo)
        ch = PaperChooser(state, "bestfit", Workload.of([Demand(1, 1000, 1000, 1024)], state.model_names), seed)
        node, gpus = ch.choose(Demand(1, 1000, 1000, 1024), np.ones(16, dtype=bool))
        assert node == int(np.argmin(tie_rank(16, seed))) and gpus == (0,)
        firsts.add(node)
    assert len(firsts) > 1


def test_gpu_packing_puts_a_sharing_pod_on_the_fullest_partly_used_device():
    state = CapacityState(uniform_topology(3, 2))
    state.allocate(Allocation("x", 0, 1, (1,), 300, 1000, 1024))  # node 1 device 1: 700 free
    state.allocate(Allocation("y", 0, 2, (0,), 600, 1000, 1024))  # node 2 device 0: 400 free
    d = Demand(1, 400, 1000, 1024)
    ch = PaperChooser(state, "gpu-packing", Workload.of([d], state.model_names), 42)
    assert ch.choose(d, np.ones(3, dtype=bool)) == (2, (0,))


def test_fgd_paper_takes_the_lowest_index_device_among_equal_quantised_scores():
    state = CapacityState(uniform_topology(1, 4))
    state.allocate(Allocation("x", 0, 0, (0,), 400, 1000, 1024))  # device 0: 600 free
    state.allocate(Allocation("y", 0, 0, (1,), 500, 1000, 1024))  # device 1: 500 free
    d = Demand(1, 100, 1000, 1024)
    wl = Workload.typical([d, Demand(1, 1000, 1000, 1024)], state.model_names)
    # Either partly used device grows F equally (-100 milli: the room a whole-GPU pod cannot use
    # shrinks by the pod); the tightest-device rule of `fgd` would take device 1.
    assert PaperChooser(state, "fgd-paper", wl, 42).choose(d, np.ones(1, dtype=bool)) == (0, (0,))
    from kilorl.placement.simulate import PodScheduler

    assert PodScheduler(state.copy(), "fgd", wl).try_place(TracePod("p", d, 0.0, None)).gpus == (1,)


SHORT_SEEDS = (42, 43)
"""Seeds of the short check; the ten published seeds 42-51 run as a benchmark (docs/benchmarks.md, issue 36)."""


@needs_data
@pytest.mark.parametrize(("policy", "tol"), [("fgd-paper", 0.3), ("bestfit", 0.5), ("dotprod", 0.5)])
def test_the_paper_baselines_reproduce_the_published_curve_on_default(policy, tol):
    """Two seeds of ``default`` at 100% and 130% arrived, against the mean of the ten published seeds.

    The published runs' spread over seeds is 0.10 (FGD) to 0.18 points (DotProd), so the
    mean of two seeds sits within 0.3 / 0.5 of theirs; a policy that scores differently
    does not: with ``scoring.paper_score`` broken to exact gradients (FGD without the
    artifact's quantised scores) ``fgd-paper`` averages 94.24% at 100% on these two seeds,
    1.0 point below the published 95.23%, and this test fails.
    """
    topo = read_nodes(DATA / "openb_node_list_gpu_node.csv")
    trace = read_pods(DATA / "openb_pod_list_default.csv")
    published = read_published(DATA / "fgd_published_allocation.csv")[("default", PUBLISHED_NAMES[policy])]
    if policy == "fgd-paper":  # the published file read right: the paper's 95.23% at 100% arrived
        assert published[:, 100].mean() == pytest.approx(95.23, abs=0.01)
    curves = np.array([simulate(topo, trace, policy, seed=s).curve for s in SHORT_SEEDS])
    assert curves[:, 100].mean() == pytest.approx(published[:, 100].mean(), abs=tol)
    assert curves[:, 130].mean() == pytest.approx(published[:, 130].mean(), abs=tol)


def test_binpack_topo_weighs_each_type_by_the_gpu_share_it_asks():
    from kilorl.placement.policies import by_gpu_share

    wl = by_gpu_share(Workload.of([Demand(8, 1000, 1000, 1024)] + [Demand(1, 100, 1000, 1024)] * 8
                                  + [Demand(0, 0, 1000, 1024)] * 5, ["T4"]))
    share = dict(zip(wl.num_gpus * wl.gpu_milli, wl.prob, strict=True))
    # One 8-GPU pod asks 8 GPUs, the eight 0.1-GPU pods 0.8: 10 to 1; CPU-only pods weigh nothing.
    assert share[8000] == pytest.approx(8 / 8.8) and share[100] == pytest.approx(0.8 / 8.8) and share[0] == 0


def test_binpack_topo_estimates_from_the_pods_seen_so_far_each_time_they_double():
    from kilorl.placement.simulate import PodScheduler

    state = CapacityState(uniform_topology(4, 8))
    future = Workload.of([Demand(8, 1000, 1000, 1024)], state.model_names)  # the list: 8-GPU pods only
    sched = PodScheduler(state, "binpack-topo", future, estimate="seen")
    small = TracePod("s", Demand(1, 1000, 1000, 1024), 0.0, None)
    scorers = []
    for _ in range(5):
        sched.observe(small)
        scorers.append(sched.scorer)
    # Re-estimated after arrivals 1, 2 and 4 only, and only from what has arrived: 1-GPU pods.
    assert len({id(s) for s in scorers}) == 3 and scorers[3] is scorers[4]
    assert sched.scorer.workload.num_gpus.tolist() == [1]
    with pytest.raises(ValueError, match="estimate"):
        PodScheduler(state, "binpack-topo", future, estimate="oracle")
