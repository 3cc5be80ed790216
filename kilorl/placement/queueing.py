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
- ``reserve``: backfill, but the oldest waiting pod holds one node (among those it fits on
  when empty, the one with the most free GPU share) that no younger pod may take, so it
  starts once that node has drained (EASY-style, without runtime estimates).

Invariant that keeps it cheap: with ``backfill`` every queued pod fits nowhere, so when a
pod leaves node n only pods that fit on n can start, and only on n. With ``fifo`` only the
head is ever tried. A pod bigger than any empty node is rejected on arrival.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from collections.abc import Sequence

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
        self.reserved = -1
        """Node held for the head of the queue (``reserve``), -1 for none."""
        self._open = np.ones(len(sched.state.cpu_free), dtype=bool)

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
        heapq.heappush(self.events, (self.now + (self.pods[i].deletion - self.pods[i].creation), 0, i))
        return True

    def _arrive(self, i: int) -> None:
        self.res.arrived += 1
        if self.pods[i].demand in self._never:
            self.res.failed += 1
            self.res.failed_gpu += self.pods[i].demand.total_gpu_milli / 1000.0
            self.res.rejected.append(self.pods[i].name)
            return
        if not self.queue or self.discipline != "fifo":
            if self._try(i, self._open if self.reserved >= 0 else None):
                return
        self.queue.append(i)
        self.queued[self.pods[i].demand] += 1
        if self.discipline == "reserve" and len(self.queue) == 1:
            self._reserve()

    def _reserve(self) -> None:
        """Hold a node for the head of the queue; release the old one."""
        if self.reserved >= 0:
            self._open[self.reserved] = True
        self.reserved = -1
        if self.queue:
            state = self.sched.state
            could = np.flatnonzero(self._could[self.pods[self.queue[0]].demand])
            best = could[np.lexsort((could, -state.cpu_free[could], -state.gpu_total[could]))[0]]
            self.reserved = int(best)
            self._open[best] = False

    def _depart(self, i: int) -> None:
        a = self.live.pop(i)
        self.sched.release(a)
        state = self.sched.state
        if self.discipline == "fifo":
            while self.queue and self._try(self.queue[0]):
                self._dequeued(self.queue.popleft())
            return
        opened = [a.node]
        if self.discipline == "reserve":
            head_started = False
            while self.queue and self._try(self.queue[0]):
                self._dequeued(self.queue.popleft())
                head_started = True
            if head_started:
                if self.reserved >= 0:
                    opened.append(self.reserved)
                self._reserve()
            opened = [n for n in opened if n != self.reserved]
        self._backfill(state, opened)

    def _backfill(self, state: CapacityState, nodes: list[int]) -> None:
        """Queued pods fit nowhere but on ``nodes`` (the ones that just freed up): start those that fit there."""
        if not nodes or not any(state.fits_on(n, d) for n in nodes for d in self.queued):
            return
        only = np.zeros(len(state.cpu_free), dtype=bool)
        only[nodes] = True
        blocked: set[Demand] = set()  # the nodes only get fuller during this pass
        kept: deque[int] = deque()
        for j in self.queue:
            d = self.pods[j].demand
            if d in blocked or not any(state.fits_on(n, d) for n in nodes) or not self._try(j, only):
                blocked.add(d)
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
