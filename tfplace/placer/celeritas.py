"""The Celeritas placer: Optimal Operation Fusion, then Adjusting Placement (or Order-Place).

Celeritas section 5 and Figure 2: order the ops by CPD-TOPO (a co-placed gradient op after its
forward op, :func:`~tfplace.core.orders.leaders_first`, so that the forward op's cluster decides
their group's device), fuse adjacent ops into clusters
(Algorithm 1), place the clusters of the coarse graph (Algorithm 2), and map the clusters back to
their ops, each co-location group whole on the device of its first placed op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tfplace.core.costgraph import ccr
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph, index_graph
from tfplace.core.orders import (
    average_parallelism,
    cpd_topo_order,
    heavy_input_order,
    kahn_order,
    leaders_first,
)
from tfplace.placer.adjusting import (
    ClusterPlacer,
    ClusterSchedule,
    adjusting_placement,
    balanced_fill,
    order_place_clusters,
)
from tfplace.placer.base import PlacerOutput
from tfplace.placer.fusion import Fusion, fuse
from tfplace.placer.ledger import MemoryLedger, Replay
from tfplace.placer.refine import offload_side_work, refine_boundaries

__all__ = ["DEFAULT_EXPLORATION_RANGE", "celeritas", "order_place"]

#: ``R`` of Eq. 6, the paper's choice (section 5.1.3).
DEFAULT_EXPLORATION_RANGE = 200

#: Under the liveness model, when the placer's own estimate of a device's peak exceeds it, the share
#: of each device's memory the clusters may fill is bisected this many times, keeping the largest
#: share whose placement fits. A cluster's co-location groups bring ops that run later (gradient ops
#: co-placed with their forward ops, weight gradients held until the update) and must run where the
#: group went whatever memory is left then; filling less leaves them room.
FILL_BISECTIONS = 6

#: The pipeline candidate's clusters hold at most this share of a stage's ops (``R`` lowered to
#: ``n / (CLUSTERS_PER_STAGE * stages)`` on small graphs), so that the compute-balanced cut has
#: clusters to choose among.
CLUSTERS_PER_STAGE = 4

#: The fastest candidates that fill several devices whose boundaries are refined (the fastest
#: before refinement is not always the fastest after it), those within ``REFINED_WITHIN`` of the
#: fastest one's makespan (a refinement gains a few percent; each costs up to
#: :data:`~tfplace.placer.refine.MAX_MOVES` replays, then the part moves'
#: :data:`~tfplace.placer.refine.PART_MOVE_BUDGET`).
REFINED_CANDIDATES = 2
REFINED_WITHIN = 0.05


def celeritas(
    graph: IndexedGraph,
    devices: DeviceSet,
    *,
    exploration_range: int = DEFAULT_EXPLORATION_RANGE,
    cluster_memory: float | None = None,
    memory_model: str = "liveness",
    order_place_guard: bool = True,
) -> PlacerOutput:
    """Optimal Operation Fusion with ``R = exploration_range`` and ``M = cluster_memory`` (default:
    a quarter of the smallest device's memory, as the paper), then Adjusting Placement; memory
    counted by ``memory_model`` (:mod:`tfplace.placer.ledger`).

    Section 5.2 argues that Adjusting Placement never runs slower than Order-Place, which is not a
    theorem (:func:`~tfplace.placer.adjusting.adjusting_placement`). With ``order_place_guard``
    Celeritas makes it true of its own estimate: it builds both on the same clusters and keeps
    Order-Place's placement when that fits where Adjusting Placement's does not, or is faster.
    Under the liveness model "faster" is the makespan of the executor-order replay that checks the
    final placement's memory anyway (:meth:`~tfplace.placer.ledger.MemoryLedger.replayed`), a list
    schedule of the ops; Algorithm 2's cluster schedule holds a cluster until all its inputs
    arrived and misses the overlap of ops inside clusters (Inception V3: 2.99 s for a 2.77 s step).

    Under liveness, when memory forces the step over several devices (Order-Place fills more than
    one), Celeritas also fuses along Kahn's breadth-first order and fills the devices with those
    clusters: a CPD-TOPO cluster runs down one path (the critical path first), a breadth-first one
    holds parallel branches side by side, so the fill ends elsewhere and the devices exchange other
    tensors; which is faster depends on the graph, and the replay decides. Then the clusters next
    to the device boundaries of the kept placement move across them, and parts of clusters to any
    target device, while the replay gets faster
    (:func:`~tfplace.placer.refine.refine_boundaries`, ``details["refined"]``; ``cluster_devices``
    and ``schedule`` stay the candidate's).

    A pipeline candidate (in the spirit of Order-Place, section 6.2.2, with a compute target
    instead of the memory fill): when the step's average parallelism (total compute over the
    longest path's, :func:`~tfplace.core.orders.average_parallelism`) is 2 or more, Celeritas fuses
    along :func:`~tfplace.core.orders.heavy_input_order` of CPD-TOPO (Algorithm 1's fusion on an
    order that keeps together the ops sharing a heavy input, such as the time steps of an unrolled
    layer, which all read its weights) and cuts the clusters into ``k = 2 .. ceil(parallelism)``
    contiguous runs of equal compute, run ``i`` on device ``i``
    (:func:`~tfplace.placer.adjusting.balanced_fill`): a layer pipeline, which CPD-TOPO's clusters
    (one time step across all layers) never yield. The :data:`REFINED_CANDIDATES` fastest candidates
    that fill several devices (within :data:`REFINED_WITHIN` of the fastest) are refined, and the
    fastest result is kept.

    When the kept placement uses one target (the step fits it and no spread candidate is faster),
    its side work, the co-location groups whose tensors still arrive in time from an idle device
    (a variable's update, a batch norm's moving averages), moves there while the replay gets faster
    (:func:`~tfplace.placer.refine.offload_side_work`, ``details["refined"]``): one device runs
    every op one after another, the idle one runs that work meanwhile.

    ``details["cluster_placer"]`` and ``details["fusion_order"]`` name the candidate kept,
    ``details["candidates"]`` lists each one considered (fusion order, cluster placer, estimated
    makespan, whether it fits). Without the guard Celeritas is the paper's (CPD-TOPO, Adjusting
    Placement, its cluster schedule's estimate).
    """
    placers = [adjusting_placement, order_place_clusters] if order_place_guard else [adjusting_placement]
    search = order_place_guard and memory_model == "liveness"
    return _fuse_and_place(graph, devices, exploration_range, cluster_memory, memory_model, placers, search)


def order_place(
    graph: IndexedGraph,
    devices: DeviceSet,
    *,
    exploration_range: int = DEFAULT_EXPLORATION_RANGE,
    cluster_memory: float | None = None,
    memory_model: str = "liveness",
) -> PlacerOutput:
    """The same fusion (along CPD-TOPO), then Order-Place: clusters fill one device after another."""
    return _fuse_and_place(
        graph,
        devices,
        exploration_range,
        cluster_memory,
        memory_model,
        [order_place_clusters],
        False,
    )


def _heavy_input_cpd_order(graph: IndexedGraph) -> list[int]:
    """CPD-TOPO regrouped by heavy inputs (:func:`~tfplace.core.orders.heavy_input_order`)."""
    return heavy_input_order(graph, cpd_topo_order(graph))


def _filled_first_device(candidate: _Candidate) -> bool:
    """Whether the candidate put every cluster on device 0, each with room there, filling all of
    its memory: Order-Place, which fills device 0 first, makes that same placement (one fewer
    placement of the ops to compute)."""
    schedule = candidate.schedule
    return candidate.share == 1.0 and not schedule.best_effort and not any(schedule.devices)


def _fits_devices(ledger: MemoryLedger) -> bool:
    """Whether every target's estimated peak is within its memory (the margin of
    :data:`~tfplace.placer.ledger.LIVENESS_MARGIN` is for deciding, not for this final check)."""
    return all(ledger.used(d) <= device.memory for d, device in enumerate(ledger.devices.devices))


def _targets_filled(ledger: MemoryLedger) -> int:
    """How many target devices (not fallback CPUs) hold ops."""
    return int(
        np.count_nonzero(np.bincount(ledger.op_devices(), minlength=ledger.num_targets)[: ledger.num_targets])
    )


@dataclass(frozen=True)
class _Candidate:
    """One placement Celeritas considered: the fusion it placed, how, and the result."""

    fusion: Fusion
    coarse: IndexedGraph
    placer: ClusterPlacer
    order: Callable[[IndexedGraph], list[int]]
    ledger: MemoryLedger
    schedule: ClusterSchedule
    share: float

    @property
    def makespan(self) -> float:
        """The executor replay's makespan under liveness, else the cluster schedule's (Algorithm 2)."""
        if self.ledger.memory_model == "liveness":
            return self.ledger.replayed().makespan
        return self.schedule.makespan


def _fuse_and_place(
    graph: IndexedGraph,
    devices: DeviceSet,
    exploration_range: int,
    cluster_memory: float | None,
    memory_model: str,
    cluster_placers: Sequence[ClusterPlacer],
    search: bool,
) -> PlacerOutput:
    """Fuse along CPD-TOPO and place with each of ``cluster_placers``; keep the candidate that fits,
    then the fastest. With ``search``, when the last of them (Order-Place) filled more than one
    target, also fuse along Kahn's order and fill with Order-Place; when the step's average
    parallelism is 2 or more, add the pipeline candidates; refine the boundaries of the fastest
    ones that fill more than one target (:func:`celeritas`)."""
    memory_cap = cluster_memory if cluster_memory is not None else min(d.memory for d in devices) / 4
    replays: dict[bytes, Replay] = {}

    def place(
        order: Callable[[IndexedGraph], list[int]],
        placers: Sequence[ClusterPlacer],
        reach: int = exploration_range,
    ) -> list[_Candidate]:
        fusion = fuse(graph, leaders_first(graph, order(graph)), reach, memory_cap)
        coarse = index_graph(fusion.coarse)
        placed: list[_Candidate] = []
        for placer in placers:
            if placer is order_place_clusters and placed and _filled_first_device(placed[-1]):
                placed.append(replace(placed[-1], placer=placer))
                continue
            placed.append(
                _Candidate(
                    fusion,
                    coarse,
                    placer,
                    order,
                    *_place_within_memory(
                        graph, devices, coarse, fusion.members, memory_model, placer, replays
                    ),
                )
            )
        return placed

    candidates = place(cpd_topo_order, cluster_placers)
    if search and _targets_filled(candidates[-1].ledger) > 1:
        candidates += place(kahn_order, [order_place_clusters])
    parallelism = average_parallelism(graph) if search and len(devices) > 1 else 1.0
    stages = min(len(devices), math.ceil(parallelism)) if parallelism >= 2 else 1
    if stages > 1:
        reach = max(1, min(exploration_range, len(graph) // (CLUSTERS_PER_STAGE * stages)))
        candidates += place(_heavy_input_cpd_order, [balanced_fill(k) for k in range(2, stages + 1)], reach)
    ranked = sorted(candidates, key=lambda c: (not _fits_devices(c.ledger), c.makespan))
    best, ledger, refined = ranked[0], ranked[0].ledger, None
    spread = (
        [c for c in ranked if _fits_devices(c.ledger) and _targets_filled(c.ledger) > 1] if search else []
    )
    near = [c for c in spread if c.makespan <= (1 + REFINED_WITHIN) * spread[0].makespan] if spread else []
    for candidate in near[:REFINED_CANDIDATES]:
        result = refine_boundaries(
            candidate.ledger, candidate.coarse, candidate.fusion.members, candidate.schedule.devices
        )
        final = result if result is not None else candidate.ledger
        if final.replayed().makespan < ledger.replayed().makespan:
            best, ledger, refined = candidate, final, result
    if search and len(devices) > 1 and _fits_devices(ledger) and _targets_filled(ledger) == 1:
        offloaded = offload_side_work(ledger)
        if offloaded is not None:
            ledger = refined = offloaded
    fusion, schedule = best.fusion, best.schedule
    compute = float(graph.compute.sum())
    return PlacerOutput(
        op_devices=ledger.op_devices(),
        ledger=ledger,
        estimated_makespan=ledger.replayed().makespan if refined else best.makespan,
        details={
            "clusters": len(fusion.members),
            "ccr_before": sum(map(sum, graph.succ_time)) / compute if compute else float("inf"),
            "ccr_after": ccr(fusion.coarse),
            "best_effort_clusters": len(schedule.best_effort),
            "cluster_placer": best.placer.__name__,
            "fusion_order": best.order.__name__,
            "fill_share": best.share,
            "refined": refined is not None,
            "candidates": [
                (c.order.__name__, c.placer.__name__, c.makespan, _fits_devices(c.ledger)) for c in candidates
            ],
            "coarse_graph": fusion.coarse,
            "cluster_devices": schedule.devices,
            "schedule": schedule,
        },
    )


def _place_within_memory(
    graph: IndexedGraph,
    devices: DeviceSet,
    coarse: IndexedGraph,
    members: Sequence[Sequence[int]],
    memory_model: str,
    place_clusters: ClusterPlacer,
    replays: dict[bytes, Replay],
) -> tuple[MemoryLedger, ClusterSchedule, float]:
    """Place the clusters filling all of each device's memory or, under liveness when the estimated
    peak then exceeds a device, the largest bisected share of it that fits (:data:`FILL_BISECTIONS`).
    A placement found before (by another share or cluster placer) is not replayed again (``replays``)."""

    def attempt(share: float) -> tuple[MemoryLedger, ClusterSchedule]:
        capacity = [int(share * d.memory) for d in devices.devices]
        ledger = MemoryLedger(graph, devices, capacity=capacity, memory_model=memory_model, replays=replays)
        return ledger, place_clusters(coarse, members, ledger)

    share = 1.0
    ledger, schedule = attempt(share)
    if memory_model == "liveness" and not _fits_devices(ledger):
        low, high = 0.0, 1.0
        for _ in range(FILL_BISECTIONS):
            middle = (low + high) / 2
            trial = attempt(middle)
            if _fits_devices(trial[0]):
                share, (ledger, schedule), low = middle, trial, middle
            else:
                high = middle
    return ledger, schedule, share
