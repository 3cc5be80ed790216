"""Queue mode of the trace simulator: pods that do not fit wait instead of being dropped.

A backlog: the same pod sequence as fill mode (the trace, submitted again until the GPU
share asked reaches ``target_load`` x capacity) is submitted at t = 0, in that order. Why
not the recorded arrival times: the recorded pods keep <1% of the GPUs busy and one pass of a
list asks less than the cluster holds, so no compression of the recorded times makes a queue.
Each pod runs for its recorded ``deletion_time - creation_time`` once started, then leaves.
Two disciplines:

- ``fifo``: strict arrival order; the head of the queue blocks everything behind it.
- ``backfill``: a pod that fits starts at once even if older pods wait (no reservation, so
  a big pod can wait long; the delay p99 shows it).
- ``reserve``: EASY backfilling (Lifka, 1995) with the recorded durations as runtime
  estimates. The oldest waiting pod (the head) holds a reservation: the node where it fits
  soonest once the running pods leave at their known end times, and that time (the shadow
  time). A younger pod may start anywhere else at once, and on the reserved node only if it
  ends by the shadow time; so the head starts at the shadow time at the latest, while the
  rest of the cluster keeps backfilling.

Invariant that keeps it cheap: with ``backfill`` every queued pod fits nowhere, so when a
pod leaves node n only pods that fit on n can start, and only on n. With ``reserve`` the same
holds for the nodes a pod may use (a pod barred from the reserved node stays barred while
that reservation lasts: time only moves towards the shadow time). With ``fifo`` only the
head is ever tried. A pod bigger than any empty node is rejected on arrival.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kilorl.placement.alibaba import TracePod
from kilorl.placement.requests import Demand
from kilorl.placement.state import Allocation, CapacityState

DISCIPLINES: tuple[str, ...] = ("fifo", "backfill", "reserve")
SAMPLES = 200
"""Allocation-over-time samples recorded."""


class QueueSimulation:
    """Event loop of one queue-mode run; ``sched`` is a ``simulate.PodScheduler``."""

    def __init__(self, sched, pods: Sequence[TracePod], res, discipline: str) -> None:
        if discipline not in DISCIPLINES:
            raise ValueError(f"unknown discipline {discipline!r}; allowed: {', '.join(DISCIPLINES)}")
        require_durations(pods)
        self.sched, self.pods, self.res = sched, pods, res
        self.discipline = discipline
        self.queue: deque[int] = deque()
        self.queued = Counter[Demand]()
        self.now = 0.0
        self.events: list[tuple[float, int, int]] = []  # (time, 0 = departure first, pod index)
        self.live: dict[int, Allocation] = {}
        self.arrival = np.zeros(len(pods))
        self.start = np.full(len(pods), np.nan)
        empty = CapacityState(sched.state.topology)
        self._could = {d: empty.fits(d) for d in {p.demand for p in pods}}
        self._never = {d for d, ok in self._could.items() if not ok.any()}
        self.reservation = Reservation(-1, float("inf"))
        """Node and shadow time held for the head of the queue (``reserve``); node -1 for none."""
        self.on_node: dict[int, set[int]] = {}
        """Running pods per node (their end times give the head's reservation)."""
        self.end = np.full(len(pods), np.inf)

    def _try(self, i: int, mask: np.ndarray | None = None) -> bool:
        t0, c0 = time.perf_counter(), time.thread_time()
        a = self.sched.try_place(self.pods[i], mask)
        self.res.latencies_us.append((time.perf_counter() - t0) * 1e6)
        self.res.cpu_us.append((time.thread_time() - c0) * 1e6)
        return a is not None and self._started(i, a)

    def _started(self, i: int, a: Allocation) -> bool:
        self.live[i] = a
        self.start[i] = self.now
        self.res.placed += 1
        self.end[i] = self.now + self._duration(i)
        self.on_node.setdefault(a.node, set()).add(i)
        heapq.heappush(self.events, (self.end[i], 0, i))
        return True

    def _duration(self, i: int) -> float:
        return float(self.pods[i].deletion - self.pods[i].creation)

    def _mask(self, i: int) -> np.ndarray | None:
        """Nodes pod ``i`` may start on now: all, but the reserved node only if ``i`` ends by the shadow time."""
        r = self.reservation
        if r.node < 0 or self.now + self._duration(i) <= r.shadow:
            return None
        mask = np.ones(len(self.sched.state.cpu_free), dtype=bool)
        mask[r.node] = False
        return mask

    def _arrive(self, i: int) -> None:
        self.sched.observe(self.pods[i])  # every arrival, tried now or queued (fill mode times it; here untimed)
        self.res.arrived += 1
        if self.pods[i].demand in self._never:
            self.res.failed += 1
            self.res.failed_gpu += self.pods[i].demand.total_gpu_milli / 1000.0
            self.res.rejected.append(self.pods[i].name)
            return
        if not self.queue or self.discipline != "fifo":
            if self._try(i, self._mask(i)):
                return
        self.queue.append(i)
        self.queued[self.pods[i].demand] += 1
        if self.discipline == "reserve" and len(self.queue) == 1:
            self._reserve()

    def _reserve(self) -> None:
        """Reserve for the head of the queue the node where it fits soonest (ties: lowest index)."""
        self.reservation = Reservation(-1, float("inf"))
        if self.queue:
            head = self.pods[self.queue[0]].demand
            for node in np.flatnonzero(self._could[head]):
                t = self._earliest_fit(int(node), head)
                if t < self.reservation.shadow:
                    self.reservation = Reservation(int(node), t)

    def _earliest_fit(self, node: int, d: Demand) -> float:
        """When ``d`` fits on ``node`` if its running pods leave at their end times and nothing joins."""
        state = self.sched.state
        gpu, cpu, mem = state.gpu_free[node].copy(), int(state.cpu_free[node]), int(state.mem_free[node])
        for j in sorted(self.on_node.get(node, ()), key=lambda j: self.end[j]):
            a = self.live[j]
            gpu[list(a.gpus)] += a.gpu_milli
            cpu, mem = cpu + a.cpu_milli, mem + a.mem_mib
            if _fits(gpu, cpu, mem, d):
                return float(self.end[j])
        return float("inf")

    def _depart(self, i: int) -> None:
        a = self.live.pop(i)
        self.on_node[a.node].discard(i)
        self.sched.release(a)
        state = self.sched.state
        if self.discipline == "fifo":
            while self.queue and self._try(self.queue[0]):
                self._dequeued(self.queue.popleft())
            return
        opened = [a.node]
        if self.discipline == "reserve":
            old = self.reservation.node
            head_started = False
            while self.queue and self._try(self.queue[0]):
                self._dequeued(self.queue.popleft())
                head_started = True
            if head_started:
                self._reserve()
                if old >= 0:
                    opened.append(old)
        self._backfill(state, sorted(set(opened)))

    def _backfill(self, state: CapacityState, nodes: list[int]) -> None:
        """Queued pods fit nowhere they may go but on ``nodes`` (the ones that just freed up):
        start those that fit there (``reserve``: on the reserved node only if they end in time)."""
        if not nodes or not any(state.fits_on(n, d) for n in nodes for d in self.queued):
            return
        blocked: set[tuple[Demand, bool]] = set()  # the nodes only get fuller during this pass
        kept: deque[int] = deque()
        for j in self.queue:
            d = self.pods[j].demand
            mask = self._mask(j)
            usable = [n for n in nodes if mask is None or mask[n]]
            key = (d, len(usable) == len(nodes))
            if key in blocked or not any(state.fits_on(n, d) for n in usable) or not self._try(j, _only(state, usable)):
                blocked.add(key)
                kept.append(j)
            else:
                self._dequeued(j)
        self.queue = kept

    def _dequeued(self, i: int) -> None:
        d = self.pods[i].demand
        self.queued[d] -= 1
        if not self.queued[d]:
            del self.queued[d]

    def run(self) -> None:
        for i in range(len(self.pods)):
            heapq.heappush(self.events, (float(self.arrival[i]), 1, i))
        state = self.sched.state
        while self.events:
            self.now, kind, i = heapq.heappop(self.events)
            if kind == 0:
                self._depart(i)
            else:
                self._arrive(i)
            self._sample(state)
        started = self.start[~np.isnan(self.start)]
        self._summarise(float(started.max()) if len(started) else 0.0)

    def _sample(self, state: CapacityState) -> None:
        """One timeline sample per event time (thinned to ``SAMPLES`` at the end)."""
        tl = self.res.timeline
        if tl and tl[-1]["time"] == self.now:
            tl.pop()
        tl.append({"time": self.now, "allocation_rate": state.allocation_rate, "queued": len(self.queue)})

    def _summarise(self, drained: float) -> None:
        started = ~np.isnan(self.start)
        delay = self.start[started] - self.arrival[started]
        busy = [s["allocation_rate"] for s in self.res.timeline if s["time"] <= drained] or [0.0]
        self.res.timeline = _thin(self.res.timeline, SAMPLES)
        self.res.extra = {
            "discipline": self.discipline,
            "delay_s_p50": round(float(np.percentile(delay, 50)), 1) if len(delay) else None,
            "delay_s_p99": round(float(np.percentile(delay, 99)), 1) if len(delay) else None,
            "delay_s_mean": round(float(delay.mean()), 1) if len(delay) else None,
            "makespan_s": round(self.now, 1),
            "drain_s": round(drained, 1),
            "mean_allocation_rate_until_drained": round(float(np.mean(busy)), 6),
            "max_queued": max((s["queued"] for s in self.res.timeline), default=0),
            "never_started": int((~started).sum()) - self.res.failed,
        }


@dataclass(frozen=True)
class Reservation:
    """The head of the queue may start on ``node`` at ``shadow`` (s) at the latest."""

    node: int
    shadow: float


def _fits(gpu: np.ndarray, cpu: int, mem: int, d: Demand) -> bool:
    """``d`` fits a node with these free devices, CPU and memory (model checked by the caller)."""
    if cpu < d.cpu_milli or mem < d.mem_mib:
        return False
    if d.num_gpus == 0:
        return True
    if d.shared:
        return bool((gpu >= d.gpu_milli).any())
    return int((gpu == 1000).sum()) >= d.num_gpus


def _only(state: CapacityState, nodes: list[int]) -> np.ndarray:
    mask = np.zeros(len(state.cpu_free), dtype=bool)
    mask[nodes] = True
    return mask


def require_durations(pods: Sequence[TracePod]) -> None:
    missing = [p.name for p in pods if p.deletion is None]
    if missing:
        raise ValueError(f"queue mode needs deletion_time for every pod; {len(missing)} have none "
                         f"(first: {missing[0]})")


def _thin(samples: list[dict[str, float]], n: int) -> list[dict[str, float]]:
    if len(samples) <= n:
        return samples
    keep = np.unique(np.linspace(0, len(samples) - 1, n).round().astype(int))
    return [samples[k] for k in keep]
