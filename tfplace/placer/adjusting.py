"""Adjusting Placement (Celeritas section 5.2, Algorithm 2) and Order-Place, on a coarse graph.

Both visit the clusters in CPD-TOPO order and place each one whole; the memory ledger counts the
cluster's ops (and whole co-location groups) on the chosen device. Order-Place fills one device to
its memory limit before moving on. Adjusting Placement keeps a cluster on the previous cluster's
device ``d_k`` unless another device ``d_1`` lets it start earlier by more than the back cost
(Eq. 8-9), computing earliest start times with insertion into idle slots (Eq. 7).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import cpd_topo_order
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.sequential import next_fill_device
from tfplace.placer.timeline import Timeline

__all__ = ["ClusterPlacer", "ClusterSchedule", "adjusting_placement", "balanced_fill", "order_place_clusters"]


@dataclass(frozen=True)
class ClusterSchedule:
    """Where each cluster went and when the placer expects it to run.

    Attributes
    ----------
    devices, start, finish : list
        Device (index into ``devices.all_devices``), start and finish time of each cluster.
    best_effort : list of int
        Clusters placed on a device without room for them.
    stay_start : list of float
        For Adjusting Placement, ``EST(d_k)`` of each cluster when it was placed: its earliest start
        on the previous cluster's device (``inf`` when that device lacked memory or cannot run it).
        For Order-Place, the start on its own device.
    """

    devices: list[int]
    start: list[float]
    finish: list[float]
    best_effort: list[int]
    stay_start: list[float]

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)


#: A placer of the clusters of a coarse graph (``members[c]``: cluster ``c``'s ops) on the ledger.
ClusterPlacer = Callable[[IndexedGraph, Sequence[Sequence[int]], MemoryLedger], ClusterSchedule]


class _Scheduler:
    """Earliest start times of clusters on devices (Eq. 7), with the ledger for memory."""

    def __init__(self, coarse: IndexedGraph, ledger: MemoryLedger):
        self.coarse = coarse
        self.ledger = ledger
        self.devices: DeviceSet = ledger.devices
        self.timelines = [Timeline() for _ in self.devices.all_devices]
        n = len(coarse)
        self.device = [-1] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.stay_start = [0.0] * n
        self.best_effort: list[int] = []

    def earliest_start(self, v: int, d: int) -> float:
        """``comp_EST`` of Algorithm 2: inputs arrived (``pre_t``), then the first idle slot."""
        coarse, devices = self.coarse, self.devices
        ready = 0.0
        for p, position in zip(coarse.pred[v], coarse.pred_position[v]):
            arrival = self.finish[p] + coarse.transfer_time(p, position, devices, self.device[p], d)
            if arrival > ready:
                ready = arrival
        return self.timelines[d].earliest_start(ready, float(coarse.compute[v]))

    def back_cost(self, v: int, src: int, dst: int) -> float:
        """``back_cost`` of Eq. 8: the longest transfer of ``v``'s outputs to one successor, from
        device ``src`` back to device ``dst`` (on the link between them)."""
        coarse = self.coarse
        return max(
            (coarse.transfer_time(v, k, self.devices, src, dst) for k in range(len(coarse.succ[v]))),
            default=0.0,
        )

    def commit(
        self, v: int, ops: Sequence[int], groups: list[int], d: int, start: float, stay_start: float
    ) -> None:
        self.ledger.commit(groups, d, ops)
        duration = float(self.coarse.compute[v])
        self.timelines[d].reserve(start, duration)
        self.device[v], self.start[v], self.finish[v] = d, start, start + duration
        self.stay_start[v] = stay_start

    def schedule(self) -> ClusterSchedule:
        return ClusterSchedule(self.device, self.start, self.finish, self.best_effort, self.stay_start)


def adjusting_placement(
    coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger
) -> ClusterSchedule:
    """Algorithm 2 on the coarse graph; ``members[c]`` are the op positions (in the ledger's graph)
    of cluster ``c``.

    For each cluster ``v_i`` in CPD-TOPO order: ``EST(d)`` is infinite where its memory does not fit
    (its ops' unplaced co-location groups, whole), else ``comp_EST`` (Eq. 7, with insertion into idle
    slots). With ``d_k`` the previous cluster's device and ``d_1`` the device of least EST (ties:
    lowest index), ``v_i`` goes to ``d_1`` when ``EST(d_k) - EST(d_1) > back_cost`` (Eq. 9), else to
    ``d_k`` when it fits there, else, every device being full, to the device with the lowest memory
    use (best effort; the ledger reports the overcommit in bytes). ``back_cost`` (Eq. 8) is the
    longest transfer from ``v_i`` to one of its successors on the link from ``d_1`` back to ``d_k``.
    The first cluster has no previous one and counts device 0 as ``d_k``.

    Returns
    -------
    ClusterSchedule
        The placer's schedule; ``stay_start`` holds each ``EST(d_k)``.

    Notes
    -----
    Section 5.2 claims every adjustment keeps the running time at or below Order-Place's. What its
    proof shows holds for each move: ``v_i``'s outputs reach ``d_k`` before staying would have
    finished ``v_i``. It does not make the whole schedule shorter than Order-Place's: after a move
    the new device becomes ``d_k`` and the next clusters stay there unless a move gains more than
    their back cost, and moves spend memory that later clusters may need. When transfers are free
    and one device holds the whole graph, Order-Place runs everything on device 0 and Adjusting
    Placement (least EST, inductively no later than that serial schedule) is never slower.
    ``tests/test_adjusting.py`` checks both and pins a counterexample of each kind.
    """
    scheduler = _Scheduler(coarse, ledger)
    previous = 0
    for v in cpd_topo_order(coarse):
        groups = ledger.new_groups(members[v])
        candidates = _cluster_candidates(ledger, groups, members[v])
        est = {d: scheduler.earliest_start(v, d) for d in candidates if ledger.fits(groups, d, members[v])}
        stay = est.get(previous, math.inf)
        if est:
            first = min(est, key=lambda d: (est[d], d))
            moves = first != previous and stay - est[first] > scheduler.back_cost(v, first, previous)
            chosen = first if moves else previous
        else:
            chosen = ledger.least_used(candidates)
            scheduler.best_effort.append(v)
        start = est[chosen] if chosen in est else scheduler.earliest_start(v, chosen)
        scheduler.commit(v, members[v], groups, chosen, start, stay)
        previous = chosen
    return scheduler.schedule()


def _cluster_candidates(ledger: MemoryLedger, groups: list[int], ops: Sequence[int]) -> list[int]:
    """Devices a cluster may go to: those its new groups can run on, narrowed to the devices its
    ops already have (members of groups an earlier cluster placed, such as gradient ops co-placed
    with their forward ops), so that the schedule runs the cluster where its ops run."""
    candidates = ledger.candidates(groups)
    pinned = ledger.placed_devices(ops)
    if not pinned:
        return candidates
    return [d for d in candidates if d in pinned] or pinned


def _pinned_device(ledger: MemoryLedger, groups: list[int], ops: Sequence[int]) -> int | None:
    """For a cluster some of whose ops are placed: the first of the devices they have
    (:func:`_cluster_candidates`) with room for its new groups; ``None`` when its ops are all
    unplaced or no such device has room."""
    if not ledger.placed_devices(ops):
        return None
    candidates = _cluster_candidates(ledger, groups, ops)
    if not groups:
        return candidates[0]
    return next((d for d in candidates if ledger.fits(groups, d, ops)), None)


def order_place_clusters(
    coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger
) -> ClusterSchedule:
    """Order-Place (section 6.2.2): clusters in CPD-TOPO order fill one device up to its memory
    limit, then the next; best effort when none is left. The schedule is built as in
    :func:`adjusting_placement`, so that both are compared on the same terms.

    A cluster some of whose ops an earlier cluster placed already (gradient ops co-placed with
    their forward ops) goes, as in Adjusting Placement, to the first device its ops have
    (:func:`_cluster_candidates`) with room for its new groups, and the fill position stays; only
    when none has room does it take the fill order. The schedule then runs it where its ops run,
    not on the device being filled (which made Order-Place's estimate of a co-placed training step
    too short by the transfers it missed, and the guard of :func:`~tfplace.placer.celeritas.celeritas`
    keep it wrongly)."""
    scheduler = _Scheduler(coarse, ledger)
    current = 0
    for v in cpd_topo_order(coarse):
        groups = ledger.new_groups(members[v])
        chosen = _pinned_device(ledger, groups, members[v])
        forced = False
        if chosen is None:
            chosen, current, forced = next_fill_device(ledger, groups, current, members[v])
        if forced:
            scheduler.best_effort.append(v)
        start = scheduler.earliest_start(v, chosen)
        scheduler.commit(v, members[v], groups, chosen, start, start)
    return scheduler.schedule()


def balanced_fill(parts: int) -> ClusterPlacer:
    """Order-Place with a compute target instead of the memory limit: the clusters, in CPD-TOPO
    order of the coarse graph, are cut into ``parts`` contiguous runs of about equal compute, run
    ``k`` on device ``k`` (the layers of a pipeline when the clusters follow the layers, as they do
    along :func:`~tfplace.core.orders.heavy_input_order`).

    A cluster's compute is that of the co-location groups it places (a forward op brings its
    co-placed gradient ops); it goes to the run its compute's midpoint falls in, or, when that
    device lacks memory, to the next one with room (:func:`~tfplace.placer.sequential.next_fill_device`).
    A cluster whose ops are placed already goes where they are, as in :func:`order_place_clusters`.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")

    def place(
        coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger
    ) -> ClusterSchedule:
        graph = ledger.graph
        group_compute = np.bincount(graph.group, weights=graph.compute, minlength=len(graph.group_members))
        target = float(graph.compute.sum()) / parts
        scheduler = _Scheduler(coarse, ledger)
        current, filled = 0, 0.0
        for v in range(len(coarse)):  # the fusion's order (topological, Lemma 2)
            groups = ledger.new_groups(members[v])
            added = float(group_compute[groups].sum()) if groups else 0.0
            chosen = _pinned_device(ledger, groups, members[v])
            forced = False
            if chosen is None:
                run = min(int((filled + added / 2) / target) if target > 0 else 0, parts - 1)
                current = max(current, run)
                chosen, _, forced = next_fill_device(ledger, groups, current % ledger.num_targets, members[v])
            filled += added
            if forced:
                scheduler.best_effort.append(v)
            start = scheduler.earliest_start(v, chosen)
            scheduler.commit(v, members[v], groups, chosen, start, start)
        return scheduler.schedule()

    place.__name__ = f"balanced_fill_{parts}"
    return place
