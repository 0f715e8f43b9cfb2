"""Adjusting Placement (Celeritas section 5.2, Algorithm 2) and Order-Place, on a coarse graph.

Both visit the clusters in CPD-TOPO order and place each one whole; the memory ledger counts the
cluster's ops (and whole co-location groups) on the chosen device. Order-Place fills one device to
its memory limit before moving on. Adjusting Placement keeps a cluster on the previous cluster's
device ``d_k`` unless another device ``d_1`` lets it start earlier by more than the back cost
(Eq. 8-9), computing earliest start times with insertion into idle slots (Eq. 7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tfplace.devices import DeviceSet
from tfplace.indexed import IndexedGraph
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.orders import cpd_topo_order
from tfplace.placer.sequential import next_fill_device
from tfplace.placer.timeline import Timeline

__all__ = ["ClusterSchedule", "adjusting_placement", "order_place_clusters"]


@dataclass(frozen=True)
class ClusterSchedule:
    """Where each cluster went and when the placer expects it to run."""

    devices: list[int]
    start: list[float]
    finish: list[float]
    best_effort: list[int]

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)


class _Scheduler:
    """Earliest start times of clusters on devices (Eq. 7), with the ledger for memory."""

    def __init__(self, coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger):
        self.coarse = coarse
        self.members = members
        self.ledger = ledger
        self.devices: DeviceSet = ledger.devices
        self.timelines = [Timeline() for _ in self.devices.all_devices]
        n = len(coarse)
        self.device = [-1] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
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

    def commit(self, v: int, groups: list[int], d: int, start: float) -> None:
        self.ledger.commit(groups, d)
        duration = float(self.coarse.compute[v])
        self.timelines[d].reserve(start, duration)
        self.device[v], self.start[v], self.finish[v] = d, start, start + duration

    def schedule(self) -> ClusterSchedule:
        return ClusterSchedule(self.device, self.start, self.finish, self.best_effort)


def adjusting_placement(
    coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger
) -> ClusterSchedule:
    """Algorithm 2 on the coarse graph; ``members[c]`` are the op positions (in the ledger's graph)
    of cluster ``c``.

    For each cluster ``v_i`` in CPD-TOPO order: ``EST(d)`` is infinite where its memory does not fit,
    else ``comp_EST``. With ``d_k`` the previous cluster's device and ``d_1`` the device of least EST,
    ``v_i`` goes to ``d_1`` when ``EST(d_k) - EST(d_1) > back_cost`` (Eq. 9, ``back_cost`` of Eq. 8:
    the largest transfer out of ``v_i``), else to ``d_k`` when it fits there, else, every device being
    full, to the device with the lowest memory use (best effort).
    """
    scheduler = _Scheduler(coarse, members, ledger)
    previous: int | None = None
    for v in cpd_topo_order(coarse):
        groups = ledger.new_groups(members[v])
        candidates = ledger.candidates(groups)
        est = {d: scheduler.earliest_start(v, d) for d in candidates if ledger.fits(groups, d)}
        back_cost = max(coarse.succ_time[v], default=0.0)
        stay = previous if previous is not None else candidates[0]
        est_stay = est.get(stay, math.inf)
        if est:
            first = min(est, key=lambda d: (est[d], d))
            chosen = first if est_stay - est[first] > back_cost else stay
        else:
            chosen = ledger.least_used(candidates)
            scheduler.best_effort.append(v)
        start = est[chosen] if chosen in est else scheduler.earliest_start(v, chosen)
        scheduler.commit(v, groups, chosen, start)
        previous = chosen
    return scheduler.schedule()


def order_place_clusters(
    coarse: IndexedGraph, members: Sequence[Sequence[int]], ledger: MemoryLedger
) -> ClusterSchedule:
    """Order-Place (section 6.2.2): clusters in CPD-TOPO order fill one device up to its memory
    limit, then the next; best effort when none is left. The schedule is built as in
    :func:`adjusting_placement`, so that both are compared on the same terms."""
    scheduler = _Scheduler(coarse, members, ledger)
    current = 0
    for v in cpd_topo_order(coarse):
        groups = ledger.new_groups(members[v])
        chosen, current, forced = next_fill_device(ledger, groups, current)
        if forced:
            scheduler.best_effort.append(v)
        scheduler.commit(v, groups, chosen, scheduler.earliest_start(v, chosen))
    return scheduler.schedule()
