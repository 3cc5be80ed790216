"""Trace-driven scheduler simulation.

Two modes:

- ``fill`` (FGD's methodology): pods arrive in trace order and never leave; once the trace
  is used up it is submitted again, until the GPU share that has *arrived* reaches
  ``target_load`` x the cluster's GPUs. A pod that fits nowhere is rejected (not queued).
  The cluster is **saturated** once arrived GPU demand reaches 100% of its GPU capacity;
  beyond that only fragmentation keeps GPUs idle.
- ``replay``: arrivals at ``creation_time``, departures at ``deletion_time``, as recorded.
- ``queue``: arrivals compressed in time to a target offered load; pods that do not fit
  wait (``fifo`` or ``backfill``) and run for their recorded duration (``queueing``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kilorl.placement.alibaba import TracePod
from kilorl.placement.baselines import PAPER_POLICIES, PaperChooser
from kilorl.placement.fragmentation import Workload, leftover_gpus, sliver_floor
from kilorl.placement.policies import POLICIES, check_policy, choose_node, pick_gpus, scorer_for
from kilorl.placement.protocol import CurvePoints, allocation_curve, arrival_sequence, repeat_sequence
from kilorl.placement.queueing import QueueSimulation
from kilorl.placement.requests import Demand, GangRequest
from kilorl.placement.scoring import FragScorer
from kilorl.placement.state import Allocation, CapacityState
from kilorl.placement.topology import Topology

MODES: tuple[str, ...] = ("fill", "replay", "queue")
CHECKPOINT_STEP = 0.05
"""``fill`` records a sample every time another 5% of the GPU capacity has arrived."""


@dataclass
class SimResult:
    policy: str
    mode: str
    gpus: float
    """Cluster GPU capacity."""
    arrived: int = 0
    placed: int = 0
    failed: int = 0
    failed_gpu: float = 0.0
    """GPU share asked by rejected pods."""
    rejected: list[str] = field(default_factory=list)
    """Names of the pods / jobs that could not be placed (in arrival order)."""
    timeline: list[dict[str, float]] = field(default_factory=list)
    """Samples: arrived load or time, allocation rate, fragmentation."""
    latencies_us: list[float] = field(default_factory=list)
    """Wall time of each placement decision."""
    cpu_us: list[float] = field(default_factory=list)
    """CPU time of the same decisions (the figure that survives a loaded machine)."""
    final_allocation_rate: float = 0.0
    final_fragmentation_gpus: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    """Mode-specific numbers (job mode: mean learner all-reduce, peak allocation)."""
    order: str = "shuffled"
    """Arrival order of fill and queue modes (``protocol.ORDERS``); ``recorded`` in replay mode."""
    seed: int = 42
    """Seed of the shuffle, the resizing and the baselines' tie order."""
    curve: list[float] = field(default_factory=list)
    """Fill mode: allocation (%) at every 1% of arrived GPU demand, read as the FGD authors do
    (``protocol.allocation_curve``)."""

    @property
    def unallocated_gpus(self) -> float:
        return self.gpus * (1 - self.final_allocation_rate)

    def points(self) -> CurvePoints | None:
        """Allocation (%) at 100% and at the end (130%) of arrived load, and at saturation."""
        if len(self.curve) <= 100 or np.isnan(self.curve[100:]).all():
            return None
        return CurvePoints.of(np.array(self.curve), top=len(self.curve) - 1)

    def saturated_allocation_rate(self) -> float | None:
        """Mean allocation rate once arrived GPU demand has reached 100% of capacity: the mean of the
        1% curve from 100% on (fill mode), else of the 5% samples from 100% on."""
        pts = self.points()
        if pts is not None:
            return pts.saturation / 100
        vals = [s["allocation_rate"] for s in self.timeline if s.get("arrived_load", 0) >= 1.0 - 1e-9]
        return float(np.mean(vals)) if vals else None

    def to_dict(self) -> dict[str, Any]:
        lat = np.array(self.latencies_us) if self.latencies_us else np.zeros(1)
        cpu = np.array(self.cpu_us) if self.cpu_us else np.zeros(1)
        sat = self.saturated_allocation_rate()
        pts = self.points()
        at100 = None if pts is None else round(pts.at100 / 100, 6)
        return {
            "policy": self.policy, "mode": self.mode, "order": self.order, "seed": self.seed,
            "gpus": self.gpus, "arrived": self.arrived,
            "allocation_at_100": at100,
            "unallocated_gpus_at_100": None if at100 is None else round(self.gpus * (1 - at100), 2),
            "placed": self.placed, "failed": self.failed, "failed_gpu": round(self.failed_gpu, 3),
            "final_allocation_rate": round(self.final_allocation_rate, 6),
            "saturated_allocation_rate": None if sat is None else round(sat, 6),
            "unallocated_gpus": round(self.unallocated_gpus, 2),
            "final_fragmentation_gpus": round(self.final_fragmentation_gpus, 2),
            "latency_us_p50": round(float(np.percentile(lat, 50)), 1),
            "latency_us_p99": round(float(np.percentile(lat, 99)), 1),
            "cpu_us_p50": round(float(np.percentile(cpu, 50)), 1),
            "cpu_us_p99": round(float(np.percentile(cpu, 99)), 1),
            **self.extra,
            "rejected": self.rejected,
            "timeline": self.timeline,
            "curve": self.curve,
        }


def fill_sequence(pods: Sequence[TracePod], capacity_milli: int, target_load: float) -> list[TracePod]:
    """The trace in file order, submitted again and again until ``target_load`` x capacity (``protocol.repeat_sequence``)."""
    return repeat_sequence(pods, capacity_milli, target_load)


ESTIMATES: tuple[str, ...] = ("seen", "list")
"""Where ``binpack-topo`` takes its workload estimate from (``PodScheduler``)."""
SIM_POLICIES: tuple[str, ...] = POLICIES + PAPER_POLICIES
"""Policies the pod simulator runs: ours (``policies``) and the FGD paper's baselines (``baselines``)."""


def check_sim_policy(name: str) -> str:
    if name not in SIM_POLICIES:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(SIM_POLICIES)}")
    return name


class PodScheduler:
    """One pod at a time onto one node (the trace's pods never span nodes).

    ``seed`` and ``paper_workload`` only matter for the paper's baselines: their tie order (and
    ``random``'s draws), and the workload ``fgd-paper`` estimates (default ``workload``).
    ``estimate``: where ``binpack-topo`` takes its workload from: ``list`` (``workload``, the
    list as a whole) or ``seen`` (the pods ``observe`` has been shown so far, ``observe``).
    """

    def __init__(self, state: CapacityState, policy: str, workload: Workload, *, seed: int = 42,
                 paper_workload: Workload | None = None, estimate: str = "list") -> None:
        if estimate not in ESTIMATES:
            raise ValueError(f"unknown estimate {estimate!r}; allowed: {', '.join(ESTIMATES)}")
        self.state, self.policy, self.estimate = state, check_sim_policy(policy), estimate
        self.seen: Counter[Demand] = Counter()
        self._next_estimate = 1
        self.paper = PaperChooser(state, policy, paper_workload or workload, seed) if policy in PAPER_POLICIES else None
        self.scorer = scorer_for(policy, workload) if self.paper is None else None
        # Reported fragmentation: the paper's measure for every policy, so they compare.
        self.report = self.scorer if self.scorer is not None and self.scorer.measure == "paper" else FragScorer(workload)
        for s in {id(self.report): self.report, id(self.scorer): self.scorer}.values():
            if s is not None:
                s.refresh(state)
        self.all_nodes = np.ones(len(state.cpu_free), dtype=bool)

    def observe(self, pod: TracePod) -> None:
        """A pod has arrived. With ``estimate="seen"``, ``binpack-topo`` re-estimates its workload (mix,
        CPU and memory per GPU, rare hosts) from the pods seen so far each time their number
        doubles: after 1, 2, 4, ... arrivals, so about 14 times in 10,000 pods, and never from pods
        that have not arrived yet."""
        if self.estimate != "seen" or self.policy != "binpack-topo":
            return
        self.seen[pod.demand] += 1
        n = self.seen.total()
        if n >= self._next_estimate:
            self._next_estimate = 2 * n
            self.scorer = scorer_for(self.policy, Workload.from_counts(self.seen.most_common(), self.state.model_names))
            self.scorer.refresh(self.state)

    def _touched(self, node: int, d: Demand, sign: int) -> None:
        self.report.refresh(self.state, [node])
        if self.scorer is not None and self.scorer is not self.report:
            self.scorer.refresh(self.state, [node])
        if self.paper is not None:
            self.paper.placed(node, d, sign)

    def try_place(self, pod: TracePod, mask: np.ndarray | None = None) -> Allocation | None:
        """Place ``pod`` on the policy's node (among ``mask``, default all) or return None."""
        d = pod.demand
        where = self.all_nodes if mask is None else mask
        if self.paper is not None:
            node, gpus = self.paper.choose(d, where)
        else:
            node, device = choose_node(self.policy, self.state, d, where, cache=self.scorer)
            gpus = pick_gpus(self.policy, self.state, node, d, device) if node >= 0 else ()
        if node < 0:
            return None
        a = Allocation(pod.name, 0, node, gpus, d.gpu_milli, d.cpu_milli, d.mem_mib)
        self.state.allocate(a)
        self._touched(node, d, 1)
        return a

    def release(self, a: Allocation) -> None:
        self.state.release(a)
        self._touched(a.node, Demand(len(a.gpus), a.gpu_milli if a.gpus else 0, a.cpu_milli, a.mem_mib), -1)

    def fragmentation_gpus(self) -> float:
        """The paper's fragmentation of the whole cluster now, in GPUs."""
        return float(self.report.values.sum()) / 1000.0


def simulate(
    topology: Topology,
    pods: Sequence[TracePod],
    policy: str,
    *,
    mode: str = "fill",
    target_load: float = 1.3,
    max_types: int | None = None,
    discipline: str = "fifo",
    order: str = "shuffled",
    seed: int = 42,
    estimate: str = "seen",
) -> SimResult:
    """One policy over one trace. ``target_load``: GPU share submitted / capacity (fill and
    queue modes); ``discipline``: queue mode's ``fifo``, ``backfill`` or ``reserve``; ``order``
    and ``seed``: the arrival order of fill and queue modes (``protocol.arrival_sequence``);
    ``estimate``: ``binpack-topo``'s workload from the pods seen so far or the whole list."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    if not pods:
        raise ValueError("the trace has no pods")
    state = CapacityState(topology)
    demands = [p.demand for p in pods]
    wl = Workload.of(demands, state.model_names, max_types=max_types)
    typical = Workload.typical(demands, state.model_names) if policy == "fgd-paper" else None
    sched = PodScheduler(state, policy, wl, seed=seed, paper_workload=typical, estimate=estimate)
    res = SimResult(policy, mode, state.gpu_capacity_milli / 1000.0, order=order if mode != "replay" else "recorded",
                    seed=seed)
    cap = state.gpu_capacity_milli
    placed: Counter[Demand] = Counter()

    def attempt(pod: TracePod) -> Allocation | None:
        t0, c0 = time.perf_counter(), time.thread_time()
        sched.observe(pod)  # a re-estimate counts in the latency of the pod that triggers it
        a = sched.try_place(pod)
        res.latencies_us.append((time.perf_counter() - t0) * 1e6)
        res.cpu_us.append((time.thread_time() - c0) * 1e6)
        res.arrived += 1
        if a is None:
            res.failed += 1
            res.failed_gpu += pod.demand.total_gpu_milli / 1000.0
            res.rejected.append(pod.name)
        else:
            res.placed += 1
            placed[pod.demand] += 1
        return a

    if mode == "queue":
        QueueSimulation(sched, arrival_sequence(pods, cap, target_load, order, seed), res, discipline).run()
    elif mode == "fill":
        _fill(arrival_sequence(pods, cap, target_load, order, seed), attempt, state, sched, res, target_load)
    else:
        _replay(pods, attempt, sched, res)
    res.final_allocation_rate = state.allocation_rate
    res.final_fragmentation_gpus = sched.fragmentation_gpus()
    if mode == "fill":
        res.extra = {"leftover": leftover_gpus(state, wl), "sliver_floor_gpus": round(sliver_floor(placed), 2)}
    if mode == "replay":
        rates = [s["allocation_rate"] for s in res.timeline]
        res.extra = {"mean_allocation_rate": round(float(np.mean(rates)), 6), "peak_allocation_rate": round(max(rates), 6)}
    return res


def _fill(seq: list[TracePod], attempt, state: CapacityState, sched: PodScheduler, res: SimResult,
          target_load: float) -> None:
    """Fill mode: every pod of ``seq`` tried once; a sample every 5% arrived and after every pod (the curve)."""
    cap = state.gpu_capacity_milli
    arrived_milli = 0
    arrived, allocated = np.zeros(len(seq)), np.zeros(len(seq))
    marks = [round(CHECKPOINT_STEP * i, 6) for i in range(1, int(round(target_load / CHECKPOINT_STEP)) + 1)] or [target_load]

    def sample(load: float) -> None:
        res.timeline.append({"arrived_load": load, "allocation_rate": state.allocation_rate,
                             "fragmentation_gpus": sched.fragmentation_gpus(), "failed": res.failed})

    for i, pod in enumerate(seq):
        attempt(pod)
        arrived_milli += pod.demand.total_gpu_milli
        arrived[i], allocated[i] = arrived_milli, state.allocated_gpu_milli
        while marks and arrived_milli >= marks[0] * cap:
            sample(marks.pop(0))
    if marks:  # a resized list stops just short of the target: the last sample is where it ends
        sample(round(arrived_milli / cap, 6))
    res.curve = allocation_curve(arrived, allocated, cap, top=int(round(target_load * 100))).tolist()


def _replay(pods: Sequence[TracePod], attempt, sched: PodScheduler, res: SimResult) -> None:
    """Replay mode: arrivals and departures at their recorded times."""
    state = sched.state
    events: list[tuple[float, int, int]] = []  # (time, 0=departure first, pod index)
    for i, p in enumerate(pods):
        events.append((p.creation, 1, i))
        if p.deletion is not None:
            events.append((p.deletion, 0, i))
    events.sort()
    live: dict[int, Allocation] = {}
    step = max(1, len(events) // 200)
    for j, (t, kind, i) in enumerate(events):
        if kind == 0:
            if i in live:
                sched.release(live.pop(i))
        else:
            a = attempt(pods[i])
            if a is not None:
                live[i] = a
        if j % step == 0 or j == len(events) - 1:
            res.timeline.append({"time": t, "allocation_rate": state.allocation_rate,
                                 "fragmentation_gpus": sched.fragmentation_gpus(), "failed": res.failed})


@dataclass(frozen=True)
class TraceJob:
    """A multi-role job of the synthetic mix: all its gangs placed together or not at all."""

    name: str
    gangs: tuple[GangRequest, ...]
    creation: float
    deletion: float


def simulate_jobs(topology: Topology, jobs: Sequence[TraceJob], policy: str, *, gradient_bytes: float = 4e8) -> SimResult:
    """Replay gang jobs (arrive, hold their resources, leave) with ``scheduler.place``."""
    from kilorl.placement.scheduler import PlacementError, place

    check_policy(policy)
    state = CapacityState(topology)
    res = SimResult(policy, "replay-jobs", state.gpu_capacity_milli / 1000.0)
    wl = Workload.of([g.demand for j in jobs for g in j.gangs for _ in range(g.count)], state.model_names)
    events = sorted([(j.creation, 1, i) for i, j in enumerate(jobs)] + [(j.deletion, 0, i) for i, j in enumerate(jobs)])
    live: dict[int, list[Allocation]] = {}
    ar_costs: list[float] = []
    step = max(1, len(events) // 200)
    for k, (t, kind, i) in enumerate(events):
        if kind == 0:
            for a in live.pop(i, []):
                state.release(a)
        else:
            res.arrived += 1
            t0 = time.perf_counter()
            try:
                p = place(state, jobs[i].gangs, policy, workload=wl, gradient_bytes=gradient_bytes)
            except PlacementError:
                res.failed += 1
                res.rejected.append(jobs[i].name)
                res.failed_gpu += sum(g.count * g.demand.total_gpu_milli for g in jobs[i].gangs) / 1000.0
                p = None
            res.latencies_us.append((time.perf_counter() - t0) * 1e6)
            if p is not None:
                res.placed += 1
                for a in p.allocations:
                    state.allocate(a)
                live[i] = p.allocations
                ar_costs += [e.seconds for e in p.allreduce.values()]
        if k % step == 0 or k == len(events) - 1:
            res.timeline.append({"time": t, "allocation_rate": state.allocation_rate, "failed": res.failed})
    res.final_allocation_rate = state.allocation_rate
    from kilorl.placement.fragmentation import total_fragmentation

    res.final_fragmentation_gpus = total_fragmentation(state, wl)
    res.extra = {"mean_allreduce_ms": round(float(np.mean(ar_costs)) * 1e3, 3) if ar_costs else None,
                 "mean_allocation_rate": round(float(np.mean([s["allocation_rate"] for s in res.timeline])), 6),
                 "peak_allocation_rate": round(max(s["allocation_rate"] for s in res.timeline), 6)}
    return res
