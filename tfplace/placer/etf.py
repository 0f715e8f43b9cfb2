"""m-ETF and m-SCT (Baechi): list scheduling that places each op while it schedules it.

Both share :func:`etf_schedule`, an event-driven simulation of the devices (BASELINES.md, "m-ETF"):

* At each step the scheduler starts the (ready op, device) pair with the earliest start time
  ``max(all inputs arrived on the device, device free)`` (Hwang et al.'s ETF); ties go to the op
  earlier in Kahn order (m-TOPO's order), then to the lower device index. An op is ready once all
  its predecessors have been scheduled, so start times never decrease.
* An input produced on another device arrives the edge's transfer time after its producer
  finished, on the link between the two devices (:meth:`DeviceSet.link`: topology aware).
  Transfers do not queue behind each other here; the simulator models channels.
* A tensor (a producer's output slot; an edge without slots is a tensor of its own) is sent to a
  device once: consumers placed there later use that copy and its arrival time.
* Co-location goes through the :class:`~tfplace.placer.ledger.MemoryLedger`: the first op of a
  group that starts decides the whole group's device, later members have exactly that device as
  candidate; groups no target can run go to a fallback CPU. A gradient op co-placed with its
  forward op (``graph.follower``) waits until one of its group's other ops decided the device, as
  in Baechi's forward-only placement: otherwise the gradient scope's constants and shape ops, ready
  at time 0, would spread the groups over the idle devices before any forward op ran (a stall
  releases the waiting followers of the group with the lowest id).
* Memory is dynamic, as Baechi tracks it. A device holds the persistent memory of every group
  placed on it (the whole group's, from the moment its first op is placed there); an op's outputs
  from its start until all its consumers are scheduled and those on the device have finished (and
  its transfers out have ended); a received tensor until its last consumer on that device has
  finished; an op's temporary memory while it runs. An output that is an input's buffer
  (``aliased_outputs``) allocates nothing: the first op scheduled that aliases an input on its
  device takes that input's bytes over, and they are freed with its own outputs instead. A device is a candidate for an op only if, at
  the op's start, its memory in use plus the op's outputs, temporary memory, inputs it still has to
  receive and (for an op whose group is new) the group's persistent memory fit in its capacity.
  When no device has room, best effort: the candidate device with the lowest fraction of its
  memory in use. :attr:`EtfSchedule.peak_memory` reports this dynamic model. The placement's
  estimate (the ledger's) is every placer's: under ``memory_model="liveness"`` the step replayed as
  the executor runs it, each received tensor held from its transfer's start
  (:mod:`tfplace.placer.liveness`); under ``"static"`` the sum of the outputs.

m-SCT (Hanen and Munier's SCT as Baechi adapts it) adds favorite children from the relaxed LP of
:mod:`tfplace.placer.favorite_child` and one rule. Let ``u`` be the last op scheduled on device
``d`` and ``c`` its favorite child. ``c`` is *ready soon* when all of its inputs have been
scheduled (so its start on ``d``, ``est_c = max(inputs of c arrived on d, d free)``, is known), it
is not scheduled yet and ``d`` is still a candidate for it (co-location and memory). While that
holds, ``d`` is reserved for ``c``: the op ``w`` that ETF would start on ``d`` at ``t`` instead
starts only if it does not delay ``c`` (``t + p_w <= est_c``) or if it is *urgent*, meaning its
inputs have arrived on every candidate device by ``t`` (it is held back only by busy devices, which
is when SCT runs a non-favorite op). Otherwise ``d`` offers ``c`` at ``est_c`` and ``w`` at the time
it becomes urgent, whichever is earlier. Only the op ETF ranks first on ``d`` is examined.

Efficiency: each device keeps a heap of ready ops keyed by their arrival time there and a heap of
*startable* ops (arrived by the time the device is free) keyed by Kahn rank; ops scheduled elsewhere
are deleted lazily. A step looks at the head of each device's heaps, so an op costs
``O(devices * (indegree + log n))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from heapq import heappop, heappush

import numpy as np

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import kahn_order
from tfplace.core.transfer import TransferModel
from tfplace.placer.base import PlacerOutput
from tfplace.placer.favorite_child import NO_FAVORITE, favorite_children
from tfplace.placer.ledger import UNPLACED, MemoryLedger

__all__ = ["EtfSchedule", "Transfer", "etf_schedule", "m_etf", "m_sct"]

#: (start time, Kahn rank, op): what a device offers to run next.
_Offer = tuple[float, int, int]


@dataclass(frozen=True)
class Transfer:
    """One tensor sent from one device to another by the schedule.

    ``slot`` is the producer's output slot, ``None`` for an edge without slots (its own tensor);
    ``consumer`` is the op whose placement caused the send.
    """

    producer: int
    slot: int | None
    consumer: int
    src: int
    dst: int
    nbytes: int
    start: float
    end: float


@dataclass(frozen=True)
class EtfSchedule:
    """The schedule m-ETF or m-SCT built while placing.

    Attributes
    ----------
    device, start, finish : numpy.ndarray
        Device (index into ``devices.all_devices``), start and finish time of each op.
    order : list of int
        Ops in the order they were scheduled (non-decreasing start times).
    transfers : list of Transfer
        Every tensor sent between devices, each (producer, slot, destination) once.
    peak_memory : numpy.ndarray
        Peak bytes of each device under the dynamic memory model.
    best_effort : list of int
        Ops placed on a device without room for them.
    """

    device: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    order: list[int]
    transfers: list[Transfer]
    peak_memory: np.ndarray
    best_effort: list[int]

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0


def m_etf(graph: IndexedGraph, devices: DeviceSet, *, memory_model: str = "liveness") -> PlacerOutput:
    """Baechi's m-ETF: earliest-start-time list scheduling under device memory limits.

    Returns the placement with ``estimated_makespan`` (the schedule's makespan) and ``details``:
    ``best_effort_ops``, ``transfers``, ``transfer_bytes``, ``peak_memory`` (dynamic, per device
    name) and ``schedule`` (the :class:`EtfSchedule`). ``memory_model="static"`` checks memory
    with the static sum instead of the dynamic model (the ledger's estimate follows the model).
    """
    ledger = MemoryLedger(graph, devices, memory_model=memory_model)
    schedule = etf_schedule(graph, ledger, static_memory=memory_model == "static")
    return _output(graph, ledger, schedule, {})


def m_sct(
    graph: IndexedGraph, devices: DeviceSet, *, lp_time_limit: float = 60.0, memory_model: str = "liveness"
) -> PlacerOutput:
    """Baechi's m-SCT: m-ETF whose devices wait for the favorite child of their last op.

    Favorite children come from the relaxed LP (:func:`~tfplace.placer.favorite_child.favorite_children`,
    edge costs on the device set's typical link). ``details["lp"]`` reports its size, status and
    solve seconds; when HiGHS fails or exceeds ``lp_time_limit`` seconds, the placement is m-ETF's
    and ``details["warning"]`` says so. That limit is the one wall-clock limit of any placer: within
    it the placement depends on the graph and devices only; a machine too slow or busy to solve the
    LP in time gets m-ETF's. ``details["favorites_on_parent_device"]`` counts the
    favorite children that ran on their parent's device.
    """
    lp = favorite_children(graph, devices.typical_link, time_limit=lp_time_limit)
    details: dict[str, object] = {"lp": lp.report()}
    ledger = MemoryLedger(graph, devices, memory_model=memory_model)
    if lp.solved:
        schedule = etf_schedule(graph, ledger, favorite=lp.favorite, static_memory=memory_model == "static")
        parents = np.flatnonzero(lp.favorite != NO_FAVORITE)
        same = schedule.device[parents] == schedule.device[lp.favorite[parents]]
        details["favorites_on_parent_device"] = int(same.sum())
    else:
        details["warning"] = f"m-SCT's LP was not solved ({lp.message}); the placement is m-ETF's"
        schedule = etf_schedule(graph, ledger, static_memory=memory_model == "static")
    return _output(graph, ledger, schedule, details)


def etf_schedule(
    graph: IndexedGraph,
    ledger: MemoryLedger,
    favorite: np.ndarray | None = None,
    *,
    static_memory: bool = False,
) -> EtfSchedule:
    """Schedule and place every op of ``graph`` (module docstring), committing groups to ``ledger``.

    Parameters
    ----------
    graph : IndexedGraph
        The ops; must be acyclic.
    ledger : MemoryLedger
        Empty ledger on the target devices; its capacities are the memory limits.
    favorite : numpy.ndarray, optional
        Favorite child of each op (``-1`` for none): m-SCT's reservation rule. Without it, m-ETF.
    static_memory : bool
        Check memory with the ledger's static sum instead of the dynamic model.

    Returns
    -------
    EtfSchedule

    Raises
    ------
    CostGraphError
        When the graph has a cycle.
    """
    return _ListScheduler(graph, ledger, favorite, static_memory).run()


def _output(
    graph: IndexedGraph, ledger: MemoryLedger, schedule: EtfSchedule, details: dict[str, object]
) -> PlacerOutput:
    ledger.run(schedule.order)  # the liveness estimate along the schedule's start order
    names = [d.name for d in ledger.devices.all_devices]
    details.update(
        best_effort_ops=[graph.names[op] for op in schedule.best_effort],
        transfers=len(schedule.transfers),
        transfer_bytes=sum(t.nbytes for t in schedule.transfers),
        peak_memory={names[d]: int(p) for d, p in enumerate(schedule.peak_memory) if p},
        schedule=schedule,
    )
    return PlacerOutput(
        op_devices=ledger.op_devices(), ledger=ledger, estimated_makespan=schedule.makespan, details=details
    )


class _ListScheduler:
    """The state of one :func:`etf_schedule` run; ``run`` is the event loop."""

    def __init__(
        self, graph: IndexedGraph, ledger: MemoryLedger, favorite: np.ndarray | None, static_memory: bool
    ):
        self.graph = graph
        self.static_memory = static_memory
        self.ledger = ledger
        devices = ledger.devices
        n = len(graph)
        count = len(devices.all_devices)
        self.count = count
        self.links: list[list[TransferModel | None]] = [
            [devices.link(a, b) for b in range(count)] for a in range(count)
        ]
        self.capacity: list[int] = ledger.capacity.tolist()
        self.compute: list[float] = graph.compute.tolist()
        self.outputs: list[int] = graph.outputs.tolist()
        self.temporary: list[int] = graph.temporary.tolist()
        self.group: list[int] = graph.group.tolist()
        persistent = np.zeros(len(graph.group_members), dtype=np.int64)
        np.add.at(persistent, graph.group, graph.persistent)
        self.group_persistent: list[int] = persistent.tolist()
        self.group_device = [UNPLACED] * len(graph.group_members)
        fallbacks = sorted({devices.fallback_for(devices.host_of(d)) for d in range(len(devices))})
        self.group_candidates = [list(t) if t else fallbacks for t in ledger.group_targets]
        self.rank = [0] * n
        for position, op in enumerate(kahn_order(graph)):
            self.rank[op] = position
        self.favorite: list[int] | None = None if favorite is None else np.asarray(favorite).tolist()
        # ops
        self.unscheduled_preds = [len(p) for p in graph.pred]
        self.device = [UNPLACED] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.arrival: list[list[float] | None] = [None] * n  # per device once ready; inf: not a candidate
        self.latest_arrival = [0.0] * n
        self.blocked = [0] * n  # bit d set: no room on device d when it was its turn there
        self.follower: list[bool] = graph.follower.tolist()
        self.led = [False] * len(graph.group_members)  # the group has an op that is no follower
        for op in np.flatnonzero(~graph.follower).tolist():
            self.led[self.group[op]] = True
        self.deferred: dict[int, list[int]] = {}  # unplaced group -> its ready followers
        # devices
        self.free = [0.0] * count
        self.last = [-1] * count
        self.waiting: list[list[_Offer]] = [[] for _ in range(count)]
        self.startable: list[list[tuple[int, int]]] = [[] for _ in range(count)]
        self.used = [0] * count
        self.peak = [0] * count
        self.releases: list[list[tuple[float, int]]] = [[] for _ in range(count)]
        # tensors
        self.copy_arrival: dict[tuple[int, int, int], float] = {}  # (producer, tensor, device)
        self.holders: list[dict[int, list[float]] | None] = [None] * n  # device -> [bytes, last use]
        self.taken_over: set[tuple[int, int, int]] = set()  # (producer, slot, device) an alias holds
        self.unscheduled_consumers = [len(s) for s in graph.succ]
        self.transfers: list[Transfer] = []
        self.order: list[int] = []
        self.best_effort: list[int] = []
        self.now = 0.0

    def run(self) -> EtfSchedule:
        n = len(self.graph)
        for v in range(n):
            if not self.unscheduled_preds[v]:
                self._make_ready(v)
        while len(self.order) < n:
            best: _Offer | None = None
            best_device = -1
            for d in range(self.count):
                offer = self._offer(d)
                if offer is not None and (best is None or offer < best):
                    best, best_device = offer, d
            if best is None:
                if self.deferred:
                    self._release_deferred(min(self.deferred))
                    continue
                raise RuntimeError("list scheduling stalled with ops left: a dependency was lost")
            t, _, v = best
            self.now = t
            if self._fits(v, best_device, t):
                self._schedule(v, best_device, t)
            else:
                self.blocked[v] |= 1 << best_device
                if not any(self._valid(v, d) for d in self._candidates(v)):
                    self._place_best_effort(v, t)
        return EtfSchedule(
            device=np.asarray(self.device, dtype=np.int64),
            start=np.asarray(self.start),
            finish=np.asarray(self.finish),
            order=self.order,
            transfers=self.transfers,
            peak_memory=np.asarray(self.peak, dtype=np.int64),
            best_effort=self.best_effort,
        )

    # -- readiness and offers ----------------------------------------------------------------

    def _tensors(self, u: int, position: int) -> tuple[int, ...]:
        """Tensors an edge carries: its slots, ``-1 - consumer`` for an edge without slots that
        carries bytes, nothing for a control edge."""
        slots = self.graph.succ_slots[u][position]
        if slots:
            return slots
        return (-1 - self.graph.succ[u][position],) if self.graph.succ_bytes[u][position] else ()

    def _tensor_bytes(self, u: int, position: int, tensor: int) -> int:
        if tensor < 0:
            return self.graph.succ_bytes[u][position]
        sizes = self.graph.output_sizes[u]
        return sizes[tensor] if tensor < len(sizes) else 0

    def _candidates(self, v: int) -> list[int]:
        arrival = self.arrival[v]
        assert arrival is not None
        return [d for d in range(self.count) if arrival[d] < math.inf]

    def _input_arrival(self, v: int, d: int) -> float:
        """When all inputs of ready op ``v`` are on device ``d``."""
        graph, device, finish = self.graph, self.device, self.finish
        ready = 0.0
        for u, position in zip(graph.pred[v], graph.pred_position[v]):
            source = device[u]
            if source == d:
                arrived = finish[u]
            else:
                copies = [self.copy_arrival.get((u, t, d)) for t in self._tensors(u, position)]
                if copies and None not in copies:
                    arrived = max(c for c in copies if c is not None)
                else:
                    link = self.links[source][d]
                    assert link is not None
                    arrived = finish[u] + graph.edge_time(u, position, link)
            if arrived > ready:
                ready = arrived
        return ready

    def _make_ready(self, v: int) -> None:
        placed = self.group_device[self.group[v]]
        if placed == UNPLACED and self.follower[v] and self.led[self.group[v]]:
            self.deferred.setdefault(self.group[v], []).append(v)
            return
        candidates = [placed] if placed != UNPLACED else self.group_candidates[self.group[v]]
        arrival = [math.inf] * self.count
        for d in candidates:
            arrival[d] = self._input_arrival(v, d)
            heappush(self.waiting[d], (arrival[d], self.rank[v], v))
        self.arrival[v] = arrival
        self.latest_arrival[v] = max(arrival[d] for d in candidates)

    def _release_deferred(self, group: int) -> None:
        """Offer the followers that waited for ``group``'s device (placed now, or never led)."""
        self.led[group] = False
        for w in self.deferred.pop(group):
            self._make_ready(w)

    def _valid(self, v: int, d: int) -> bool:
        """Whether device ``d`` may still run op ``v`` (heap entries failing this are stale)."""
        if self.device[v] != UNPLACED or (self.blocked[v] >> d) & 1:
            return False
        placed = self.group_device[self.group[v]]
        return placed in (UNPLACED, d)

    def _offer(self, d: int) -> _Offer | None:
        """The op device ``d`` would start next and when (ETF, then m-SCT's reservation)."""
        available = max(self.free[d], self.now)
        waiting, startable = self.waiting[d], self.startable[d]
        while waiting and waiting[0][0] <= available:
            _, rank, v = heappop(waiting)
            if self._valid(v, d):
                heappush(startable, (rank, v))
        while startable and not self._valid(startable[0][1], d):
            heappop(startable)
        offer: _Offer | None
        if startable:
            offer = (available, *startable[0])
        else:
            while waiting and not self._valid(waiting[0][2], d):
                heappop(waiting)
            offer = waiting[0] if waiting else None
        if self.favorite is None or offer is None:
            return offer
        return self._reserve(d, offer, available)

    def _reserve(self, d: int, offer: _Offer, available: float) -> _Offer:
        """m-SCT: keep device ``d`` for the favorite child of its last op (module docstring)."""
        assert self.favorite is not None
        last = self.last[d]
        child = self.favorite[last] if last >= 0 else NO_FAVORITE
        arrival = self.arrival[child] if child != NO_FAVORITE else None
        if arrival is None or child == offer[2] or not self._valid(child, d):
            return offer
        start, rank, op = offer
        child_start = max(arrival[d], available)
        if start + self.compute[op] <= child_start:
            return offer
        return min((child_start, self.rank[child], child), (max(start, self.latest_arrival[op]), rank, op))

    # -- memory ------------------------------------------------------------------------------

    def _release(self, d: int, t: float) -> None:
        releases = self.releases[d]
        while releases and releases[0][0] <= t:
            self.used[d] -= heappop(releases)[1]

    def _missing_inputs(self, v: int, d: int) -> list[tuple[int, int, int]]:
        """``(producer, edge position, tensor)`` of the inputs ``v`` needs sent to device ``d``."""
        missing = []
        for u, position in zip(self.graph.pred[v], self.graph.pred_position[v]):
            if self.device[u] != d:
                missing += [
                    (u, position, t) for t in self._tensors(u, position) if (u, t, d) not in self.copy_arrival
                ]
        return missing

    def _fits(self, v: int, d: int, t: float) -> bool:
        if self.static_memory:
            return self.ledger.fits(self.ledger.new_groups([v]), d)
        self._release(d, t)
        demand = self.outputs[v] + self.temporary[v]
        demand += sum(self._tensor_bytes(u, p, k) for u, p, k in self._missing_inputs(v, d))
        group = self.group[v]
        if self.group_device[group] == UNPLACED:
            demand += self.group_persistent[group]
        return self.used[d] + demand <= self.capacity[d]

    def _free_tensors(self, u: int) -> None:
        """All consumers of ``u`` are scheduled: free each copy of its outputs after its last use."""
        holders = self.holders[u]
        assert holders is not None
        for d, (nbytes, last_use) in holders.items():
            if nbytes:
                heappush(self.releases[d], (last_use, int(nbytes)))
        self.holders[u] = None

    def _take_over_aliased_inputs(self, v: int, d: int) -> int:
        """Move the bytes of the inputs ``v``'s aliased outputs are, on device ``d``, from their
        holders to ``v``; return how many. An input already taken over by another alias stays."""
        taken = 0
        for _, u, slot in self.graph.aliases[v]:
            holders = self.holders[u]
            sizes = self.graph.output_sizes[u]
            entry = holders.get(d) if holders is not None else None
            size = sizes[slot] if slot < len(sizes) else 0
            if entry is None or entry[0] < size or (u, slot, d) in self.taken_over:
                continue
            self.taken_over.add((u, slot, d))
            entry[0] -= size
            taken += size
        return taken

    # -- placing -----------------------------------------------------------------------------

    def _offer_group_members_again(self, group: int, d: int) -> None:
        """A group just landed on ``d``: its ready members that found no room on ``d`` earlier
        (while other devices were still open to them) may only run there now, so they are offered
        on ``d`` again; if they still do not fit, they go by best effort."""
        for w in self.graph.group_members[group]:
            arrival = self.arrival[w]
            if arrival is not None and self.device[w] == UNPLACED and (self.blocked[w] >> d) & 1:
                self.blocked[w] &= ~(1 << d)
                heappush(self.waiting[d], (arrival[d], self.rank[w], w))

    def _place_best_effort(self, v: int, t: float) -> None:
        candidates = [d for d in self._candidates(v) if self.group_device[self.group[v]] in (UNPLACED, d)]
        for d in candidates:
            self._release(d, t)
        d = min(candidates, key=lambda d: (self.used[d] / max(self.capacity[d], 1), d))
        arrival = self.arrival[v]
        assert arrival is not None
        self.best_effort.append(v)
        self._schedule(v, d, max(arrival[d], self.free[d], t))

    def _schedule(self, v: int, d: int, start: float) -> None:
        graph = self.graph
        group = self.group[v]
        if self.group_device[group] == UNPLACED:
            self.ledger.commit([group], d)
            if self.ledger.group_device[group] != d:
                raise RuntimeError(
                    f"the ledger moved the group of {graph.names[v]!r} off its candidate device"
                )
            self.group_device[group] = d
            self.used[d] += self.group_persistent[group]
            self._offer_group_members_again(group, d)
            if group in self.deferred:
                self._release_deferred(group)
        finish = start + self.compute[v]
        received = 0
        for u, position, tensor in self._missing_inputs(v, d):
            source = self.device[u]
            link = self.links[source][d]
            assert link is not None
            sent = self.finish[u]
            end = sent + graph.edge_time(u, position, link)
            nbytes = self._tensor_bytes(u, position, tensor)
            self.copy_arrival[u, tensor, d] = end
            slot = tensor if tensor >= 0 else None
            self.transfers.append(Transfer(u, slot, v, source, d, nbytes, sent, end))
            received += nbytes
            holders = self.holders[u]
            assert holders is not None
            holders.setdefault(d, [0, 0.0])[0] += nbytes
            holders[source][1] = max(holders[source][1], end)
        self.used[d] += self.outputs[v] + received
        self.peak[d] = max(self.peak[d], self.used[d] + self.temporary[v])
        inherited = self._take_over_aliased_inputs(v, d)
        for u in graph.pred[v]:
            holders = self.holders[u]
            assert holders is not None
            entry = holders.setdefault(d, [0, 0.0])
            entry[1] = max(entry[1], finish)
            self.unscheduled_consumers[u] -= 1
            if not self.unscheduled_consumers[u]:
                self._free_tensors(u)
        self.holders[v] = {d: [self.outputs[v] + inherited, finish]}
        if not graph.succ[v]:
            self._free_tensors(v)
        self.device[v], self.start[v], self.finish[v] = d, start, finish
        self.free[d] = finish
        self.last[d] = v
        self.order.append(v)
        for w in graph.succ[v]:
            self.unscheduled_preds[w] -= 1
            if not self.unscheduled_preds[w]:
                self._make_ready(w)
