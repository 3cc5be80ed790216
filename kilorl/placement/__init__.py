"""Hardware knowledge and placement: topology model, discovery, scheduler, Ray placement.

Knows nothing of RL (docs/architecture.md, "Layers") and never imports torch.
"""

from kilorl.placement.links import DEFAULT_LINKS, LinkClass, LinkSpec
from kilorl.placement.requests import Affinity, Demand, GangRequest
from kilorl.placement.scheduler import Placement, PlacementError, place
from kilorl.placement.state import Allocation, CapacityState
from kilorl.placement.topo_yaml import TopologyError, load_topology, topology_from_dict, uniform_topology
from kilorl.placement.topology import Gpu, Nic, Node, Topology

__all__ = [
    "Affinity", "Allocation", "CapacityState", "DEFAULT_LINKS", "Demand", "GangRequest", "Gpu", "LinkClass",
    "LinkSpec", "Nic", "Node", "Placement", "PlacementError", "Topology", "TopologyError", "load_topology",
    "place", "topology_from_dict", "uniform_topology",
]
