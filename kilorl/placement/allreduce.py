"""Estimated all-reduce time of a group of GPUs from the link classes it spans.

Model (hierarchical, what NCCL does on rail-optimized clusters): the GPUs of each node
reduce-scatter over their slowest intra-node link, the nodes all-reduce their 1/g shard
across the network on ``min(g, NICs)`` rails at once, then all-gather inside the node:

    t = max_n [2 (g_n - 1) / g_n * S / B_intra(n) + 2 (g_n - 1) a_intra(n)]
      + 2 (m - 1) / m * S / (min_n rails_n * B_net) + 2 (m - 1) a_net

with S the gradient bytes, g_n the group's GPUs on node n, m the nodes spanned, B_net the
slowest node-to-node path (through the spine if the group spans leaves: bandwidth divided
by the oversubscription, latency plus the spine's). One GPU per node on 32 nodes pays the
full network term; 4 full NVLink nodes pay 1/8 of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kilorl.placement.links import LinkClass
from kilorl.placement.topology import Topology


@dataclass(frozen=True)
class AllReduceEstimate:
    seconds: float
    """Estimated wall time of one all-reduce of ``bytes`` bytes."""
    nodes: int
    """Nodes the group spans."""
    leaves: int
    """Leaf switches the group spans."""
    worst_link: str
    """Slowest link class on the path (NV, PIX, ..., NET)."""
    intra_seconds: float
    net_seconds: float


def allreduce_estimate(topology: Topology, devices: Sequence[tuple[int, int]], nbytes: float) -> AllReduceEstimate:
    """``devices``: (node index, gpu index) of each rank (duplicates = shared device)."""
    if not devices:
        return AllReduceEstimate(0.0, 0, 0, LinkClass.SELF.label, 0.0, 0.0)
    per_node: dict[int, list[int]] = {}
    for node, gpu in devices:
        per_node.setdefault(node, []).append(gpu)
    worst = LinkClass.SELF
    intra = 0.0
    for node, gpus in per_node.items():
        g = len(set(gpus))
        if g < 2:
            continue
        nd = topology.nodes[node]
        link = max(nd.gpu_link(a, b) for a in gpus for b in gpus if a != b) if len(set(gpus)) > 1 else LinkClass.SELF
        worst = max(worst, link)
        spec = topology.spec(link)
        intra = max(intra, 2 * (g - 1) / g * nbytes / (spec.bandwidth_gbps * 1e9) + 2 * (g - 1) * spec.latency_us * 1e-6)
    m = len(per_node)
    net = 0.0
    nodes = [topology.nodes[i] for i in per_node]
    leaves = {nd.leaf for nd in nodes}
    if m > 1:
        worst = LinkClass.NET
        a = nodes[0]
        # The slowest pair decides; a pair across leaves pays the spine.
        specs = [topology.net_spec(a, b) for b in nodes[1:]]
        if len(leaves) > 1:
            other = next(nd for nd in nodes if nd.leaf != a.leaf)
            specs.append(topology.net_spec(a, other))
        specs += [topology.net_spec(nd, nd) for nd in nodes]
        bw = min(s.bandwidth_gbps for s in specs)
        lat = max(s.latency_us for s in specs)
        rails = min(min(len(set(per_node[i])), topology.nodes[i].rails) for i in per_node)
        net = 2 * (m - 1) / m * nbytes / (rails * bw * 1e9) + 2 * (m - 1) * lat * 1e-6
    return AllReduceEstimate(intra + net, m, len(leaves), worst.label, intra, net)
