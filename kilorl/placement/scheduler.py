"""All-or-nothing placement of gang requests, and the scores of a placement.

``place(state, requests, policy)`` works on a copy of the state: either every instance of
every gang is placed and a ``Placement`` comes back, or ``PlacementError`` names the gang
that did not fit and why, and the caller's state is untouched.

``binpack-topo`` first picks the smallest topology domain that holds a whole gang that
all-reduces (or asks for an island / a leaf): one NVLink island, else one node, else one
leaf switch, else the fewest leaves; best fit among the candidates so big domains stay
whole. Then it places instance by instance with the fragmentation gradient.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kilorl.placement.allreduce import AllReduceEstimate, allreduce_estimate
from kilorl.placement.fragmentation import Workload, total_fragmentation
from kilorl.placement.policies import check_policy, choose_node, pick_gpus, scorer_for
from kilorl.placement.requests import GangRequest
from kilorl.placement.scoring import FragScorer
from kilorl.placement.state import Allocation, CapacityState


class PlacementError(RuntimeError):
    """A gang could not be placed; nothing was allocated."""

    def __init__(self, role: str, reason: str) -> None:
        super().__init__(f"cannot place {role!r}: {reason}")
        self.role = role
        self.reason = reason


@dataclass
class Placement:
    """Where every instance went, and how good that is."""

    policy: str
    allocations: list[Allocation]
    state: CapacityState
    """The cluster after placement (the input state is not modified)."""
    seconds: float
    """Wall time of the placement decision."""
    allreduce: dict[str, AllReduceEstimate] = field(default_factory=dict)
    """Estimated all-reduce per collective role."""
    fragmentation_gpus: float = 0.0
    """FGD fragmentation of the cluster after placement, in GPUs."""

    def by_role(self) -> dict[str, list[Allocation]]:
        out: dict[str, list[Allocation]] = {}
        for a in self.allocations:
            out.setdefault(a.role, []).append(a)
        return out

    @property
    def allocation_rate(self) -> float:
        return self.state.allocation_rate

    def role_summary(self, role: str) -> dict[str, Any]:
        topo = self.state.topology
        allocs = self.by_role()[role]
        nodes = sorted({a.node for a in allocs})
        islands = {(a.node, int(self.state.island[a.node, g])) for a in allocs for g in a.gpus}
        return {
            "instances": len(allocs),
            "nodes": [topo.nodes[i].name for i in nodes],
            "leaves": sorted({topo.nodes[i].leaf for i in nodes}),
            "islands": len(islands),
            "gpus": sum(len(a.gpus) * a.gpu_milli for a in allocs) / 1000.0,
        }

    def to_dict(self) -> dict[str, Any]:
        topo = self.state.topology
        return {
            "policy": self.policy,
            "placement_ms": round(self.seconds * 1000, 3),
            "allocation_rate": round(self.allocation_rate, 6),
            "fragmentation_gpus": round(self.fragmentation_gpus, 3),
            "roles": {r: self.role_summary(r) for r in self.by_role()},
            "allreduce": {r: vars(e) for r, e in self.allreduce.items()},
            "instances": [
                {"role": a.role, "instance": a.instance, "node": topo.nodes[a.node].name, "gpus": list(a.gpus),
                 "gpu_share": a.gpu_milli / 1000.0, "cpus": a.cpu_milli / 1000.0, "memory_gb": a.mem_mib / 1024.0}
                for a in self.allocations
            ],
        }


def _order(requests: Sequence[GangRequest], policy: str) -> list[GangRequest]:
    """Roles another gang wants to be near go before it; gangs held to named nodes before free
    ones; ``binpack-topo`` then orders collectives, then gangs with a ``near_role`` affinity,
    then the rest (bigger GPU demand first)."""
    roles = {r.role for r in requests}
    for r in requests:
        for a in r.affinities:
            if a.kind == "near_role" and a.role not in roles:
                raise PlacementError(r.role, f"near_role refers to {a.role!r}, which is not in the request")
    # Gangs held to named nodes (labels) first: the most constrained take their nodes before
    # an unconstrained gang lands there by chance and leaves them no room.
    items = sorted(requests, key=lambda r: r.only_nodes is None)
    if policy == "binpack-topo":
        # Collectives, then gangs that want to be near something, then the rest; bigger first.
        items.sort(key=lambda r: (r.only_nodes is None, not r.collective, r.affinity("near_role") is None,
                                  -r.count * r.demand.total_gpu_milli))
    out: list[GangRequest] = []
    pending = items
    while pending:
        progressed = False
        for r in list(pending):
            deps = {a.role for a in r.affinities if a.kind == "near_role"}
            if deps <= {o.role for o in out}:
                out.append(r)
                pending.remove(r)
                progressed = True
                break
        if not progressed:
            raise PlacementError(pending[0].role, "near_role affinities form a cycle")
    return out


def _islands(state: CapacityState, allowed: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(node, island id, device mask) of every NVLink island on the allowed nodes."""
    out = []
    width = state.gpu_free.shape[1]
    for n in np.flatnonzero(allowed):
        for isl, members in state.topology.nodes[n].islands.items():
            mask = np.zeros(width, dtype=bool)
            mask[list(members)] = True
            out.append((int(n), int(isl), mask))
    return out


def _island_capacity(state: CapacityState, d, node: int, gmask: np.ndarray) -> int:
    """Instances of ``d`` that fit on the devices ``gmask`` of ``node`` (CPU/memory of the node)."""
    free = np.where(gmask, state.gpu_free[node], -1)
    if d.shared:
        cap = int((np.clip(free, 0, None) // d.gpu_milli).sum())
    else:
        cap = int((free == 1000).sum()) // d.num_gpus
    if d.cpu_milli:
        cap = min(cap, int(state.cpu_free[node] // d.cpu_milli))
    if d.mem_mib:
        cap = min(cap, int(state.mem_free[node] // d.mem_mib))
    return cap if state.model_ok(d)[node] else 0


def _fewest_nodes(cap: np.ndarray, mask: np.ndarray, n: int) -> dict[int, int]:
    """Instances per node covering ``n`` on the fewest nodes of ``mask``; the last node best-fit."""
    idx = np.flatnonzero(mask & (cap > 0))
    order = idx[np.lexsort((idx, -cap[idx]))]
    plan: dict[int, int] = {}
    left = n
    for k, node in enumerate(order):
        if left <= 0:
            break
        rest = order[k:]
        covering = rest[cap[rest] >= left]
        if len(covering):
            # The smallest node that still takes the remainder keeps bigger ones whole.
            node = int(covering[np.lexsort((covering, cap[covering]))[0]])
            plan[node] = left
            return plan
        take = int(min(cap[node], left))
        plan[int(node)] = take
        left -= take
    return plan if left <= 0 else {}


def _pick_domain(state: CapacityState, req: GangRequest, allowed: np.ndarray, policy: str, pref: np.ndarray | None,
                 want_island: bool, want_leaf: bool, island_required: bool, leaf_required: bool):
    """Returns (node mask, gpu mask or None) of the domain the gang goes to, or None if no domain fits."""
    d, n = req.demand, req.count
    if want_island and d.num_gpus:
        cands = []
        for node, isl, gmask in _islands(state, allowed):
            cap = _island_capacity(state, d, node, gmask)
            if cap >= n:
                free = int(np.clip(state.gpu_free[node][gmask], 0, None).sum())
                p = bool(pref[node]) if pref is not None else False
                cands.append((not p, free, int(np.clip(state.gpu_free[node], 0, None).sum()), node, isl, gmask))
        if cands:
            if policy == "first-fit":
                best = min(cands, key=lambda c: c[3])
            elif policy == "spread":
                best = max(cands, key=lambda c: (c[1], -c[3]))
            else:
                best = min(cands, key=lambda c: c[:4])
            mask = np.zeros_like(allowed)
            mask[best[3]] = True
            return mask, best[5]
        if island_required:
            return None
    if not (want_island or want_leaf):
        return allowed, None
    cap = np.where(allowed, state.capacity(d), 0)
    if policy == "binpack-topo" and (want_island or want_leaf):
        fit = np.flatnonzero(cap >= n)
        if len(fit):
            p = pref[fit] if pref is not None else np.zeros(len(fit), dtype=bool)
            node = int(fit[np.lexsort((fit, cap[fit], ~p))[0]])
            mask = np.zeros_like(allowed)
            mask[node] = True
            return mask, None
    leaves = sorted(set(state.leaf[allowed].tolist()))
    leaf_cap = {int(lf): int(cap[state.leaf == lf].sum()) for lf in leaves}
    fitting = [lf for lf, c in leaf_cap.items() if c >= n]
    if fitting:
        def key(lf: int):
            p = bool(pref is not None and pref[state.leaf == lf].any())
            return (not p, len(_fewest_nodes(cap, state.leaf == lf, n)), leaf_cap[lf], lf)
        if policy == "first-fit":
            chosen = min(fitting)
        elif policy == "spread":
            chosen = max(fitting, key=lambda lf: (leaf_cap[lf], -lf))
        else:
            chosen = min(fitting, key=key)
        return allowed & (state.leaf == chosen), None
    if leaf_required:
        return None
    return allowed, None


def _place_gang(state: CapacityState, req: GangRequest, policy: str, placed: dict[str, list[Allocation]],
                cache: FragScorer | None) -> list[Allocation]:
    d = req.demand
    allowed = np.ones(len(state.cpu_free), dtype=bool)
    if req.only_nodes is not None:
        allowed &= np.array([n.name in req.only_nodes for n in state.topology.nodes], dtype=bool)
    pref = None
    near = req.affinity("near_role")
    if near:
        role_nodes = np.zeros_like(allowed)
        role_nodes[[a.node for a in placed.get(near.role, [])]] = True
        near_leaf = np.isin(state.leaf, list(set(state.leaf[role_nodes].tolist())))
        if near.required:
            allowed &= near_leaf
        # Same node first, then same leaf.
        pref = role_nodes if policy == "binpack-topo" else near_leaf
        if policy == "binpack-topo" and not (role_nodes & state.fits(d)).any():
            pref = near_leaf
    isl, leaf, spread = req.affinity("same_island"), req.affinity("same_leaf"), req.affinity("spread")
    # Required affinities bind every policy; preferred ones (and collectives) guide binpack-topo only.
    topo_aware = policy == "binpack-topo" and not (spread and spread.required)
    want_island = bool(isl and isl.required) or (topo_aware and (bool(isl) or req.collective))
    want_leaf = bool(leaf and leaf.required) or (topo_aware and (bool(leaf) or req.collective))
    domain = _pick_domain(state, req, allowed, policy, pref, want_island, want_leaf,
                          bool(isl and isl.required), bool(leaf and leaf.required))
    if domain is None:
        what = "one NVLink island" if isl and isl.required else "one leaf switch"
        raise PlacementError(req.role, f"{req.count} instances do not fit in {what}")
    node_mask, gpu_mask = domain
    quota: dict[int, int] | None = None
    if policy == "binpack-topo" and gpu_mask is None and want_leaf and not spread:
        # A collective gang spans as few nodes as possible inside its domain.
        quota = _fewest_nodes(state.capacity(d), node_mask, req.count) or None
    used = np.zeros_like(allowed)
    count = np.zeros(len(allowed), dtype=np.int64)
    balance = count if (near and policy == "binpack-topo") else None
    used_domains: set[int] = set()
    out: list[Allocation] = []
    for i in range(req.count):
        mask = node_mask.copy()
        if spread:
            dom_free = ~np.isin(state.domain, list(used_domains))
            if spread.required:
                if not (mask & dom_free & state.fits(d)).any():
                    raise PlacementError(req.role, f"only {len(used_domains)} failure domains have room, "
                                         f"{req.count} needed")
                mask &= dom_free
            elif (mask & dom_free & state.fits(d)).any():
                mask &= dom_free
        if quota:
            node = next(iter(quota))
            quota[node] -= 1
            if not quota[node]:
                del quota[node]
            gpus = pick_gpus(policy, state, node, d)
        elif gpu_mask is not None:
            # Instances confined to one island: only that node, only those devices.
            node = int(np.flatnonzero(node_mask)[0])
            gpus = pick_gpus(policy, state, node, d, gpu_mask=gpu_mask)
        else:
            node, device = choose_node(policy, state, d, mask, used=used, preferred=pref, cache=cache, balance=balance)
            if node < 0:
                raise PlacementError(req.role, f"instance {i + 1} of {req.count} fits nowhere "
                                     f"(needs {d.total_gpu_milli / 1000:g} GPU, {d.cpu_milli / 1000:g} CPU, "
                                     f"{d.mem_mib / 1024:g} GiB)")
            gpus = pick_gpus(policy, state, node, d, device)
        a = Allocation(req.role, i, node, gpus, d.gpu_milli if d.num_gpus else 0, d.cpu_milli, d.mem_mib)
        state.allocate(a)
        if cache is not None:
            cache.refresh(state, [node])
        used[node] = True
        count[node] += 1
        used_domains.add(int(state.domain[node]))
        out.append(a)
    return out


def place(
    state: CapacityState,
    requests: Sequence[GangRequest],
    policy: str = "binpack-topo",
    *,
    workload: Workload | None = None,
    gradient_bytes: float = 4e8,
) -> Placement:
    """Place every gang or none. ``workload`` defines fragmentation (default: the requests)."""
    check_policy(policy)
    t0 = time.perf_counter()
    work = state.copy()
    wl = workload or Workload.of([r.demand for r in requests for _ in range(r.count)], work.model_names)
    cache = scorer_for(policy, wl)
    if cache is not None:
        cache.refresh(work)
    placed: dict[str, list[Allocation]] = {}
    for req in _order(requests, policy):
        if req.role in placed:
            raise PlacementError(req.role, "role requested twice")
        placed[req.role] = _place_gang(work, req, policy, placed, cache)
    seconds = time.perf_counter() - t0
    allocs = [a for r in requests for a in placed[r.role]]
    result = Placement(policy, allocs, work, seconds)
    for r in requests:
        if r.collective:
            devs = [(a.node, g) for a in placed[r.role] for g in a.gpus] or [(a.node, 0) for a in placed[r.role]]
            result.allreduce[r.role] = allreduce_estimate(work.topology, devs, gradient_bytes)
    result.fragmentation_gpus = total_fragmentation(work, wl)
    return result
