"""Hardware knowledge and placement: topology model, discovery, scheduler, Ray placement.

Knows nothing of RL (DESIGN.md §3) and never imports torch.
"""

from kilorl.cluster.links import DEFAULT_LINKS, LinkClass, LinkSpec
from kilorl.cluster.requests import Affinity, Demand, GangRequest
from kilorl.cluster.scheduler import Placement, PlacementError, place
from kilorl.cluster.state import Allocation, ClusterState
from kilorl.cluster.topo_yaml import TopologyError, load_topology, topology_from_dict, uniform_topology
from kilorl.cluster.topology import Gpu, Nic, Node, Topology

__all__ = [
    "Affinity", "Allocation", "ClusterState", "DEFAULT_LINKS", "Demand", "GangRequest", "Gpu", "LinkClass",
    "LinkSpec", "Nic", "Node", "Placement", "PlacementError", "Topology", "TopologyError", "load_topology",
    "place", "topology_from_dict", "uniform_topology",
]
