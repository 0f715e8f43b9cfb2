"""The Celeritas placer: Optimal Operation Fusion, then Adjusting Placement (or Order-Place).

Celeritas section 5 and Figure 2: order the ops by CPD-TOPO, fuse adjacent ops into clusters
(Algorithm 1), place the clusters of the coarse graph (Algorithm 2), and map the clusters back to
their ops, each co-location group whole on the device of its first placed op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tfplace.core.costgraph import ccr
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph, index_graph
from tfplace.core.orders import cpd_topo_order
from tfplace.placer.adjusting import ClusterSchedule, adjusting_placement, order_place_clusters
from tfplace.placer.base import PlacerOutput
from tfplace.placer.fusion import fuse
from tfplace.placer.ledger import MemoryLedger

__all__ = ["DEFAULT_EXPLORATION_RANGE", "celeritas", "order_place"]

#: ``R`` of Eq. 6, the paper's choice (section 5.1.3).
DEFAULT_EXPLORATION_RANGE = 200

ClusterPlacer = Callable[[IndexedGraph, Sequence[Sequence[int]], MemoryLedger], ClusterSchedule]


def celeritas(
    graph: IndexedGraph,
    devices: DeviceSet,
    *,
    exploration_range: int = DEFAULT_EXPLORATION_RANGE,
    cluster_memory: float | None = None,
) -> PlacerOutput:
    """Optimal Operation Fusion with ``R = exploration_range`` and ``M = cluster_memory`` (default:
    a quarter of the smallest device's memory, as the paper), then Adjusting Placement."""
    return _fuse_and_place(graph, devices, exploration_range, cluster_memory, adjusting_placement)


def order_place(
    graph: IndexedGraph,
    devices: DeviceSet,
    *,
    exploration_range: int = DEFAULT_EXPLORATION_RANGE,
    cluster_memory: float | None = None,
) -> PlacerOutput:
    """The same fusion, then Order-Place: clusters fill one device after another."""
    return _fuse_and_place(graph, devices, exploration_range, cluster_memory, order_place_clusters)


def _fuse_and_place(
    graph: IndexedGraph,
    devices: DeviceSet,
    exploration_range: int,
    cluster_memory: float | None,
    place_clusters: ClusterPlacer,
) -> PlacerOutput:
    memory_cap = cluster_memory if cluster_memory is not None else min(d.memory for d in devices) / 4
    fusion = fuse(graph, cpd_topo_order(graph), exploration_range, memory_cap)
    coarse = index_graph(fusion.coarse)
    ledger = MemoryLedger(graph, devices)
    schedule = place_clusters(coarse, fusion.members, ledger)
    compute = float(graph.compute.sum())
    return PlacerOutput(
        op_devices=ledger.op_devices(),
        ledger=ledger,
        estimated_makespan=schedule.makespan,
        details={
            "clusters": len(fusion.members),
            "ccr_before": sum(map(sum, graph.succ_time)) / compute if compute else float("inf"),
            "ccr_after": ccr(fusion.coarse),
            "best_effort_clusters": len(schedule.best_effort),
            "coarse_graph": fusion.coarse,
            "cluster_devices": schedule.devices,
            "schedule": schedule,
        },
    )
