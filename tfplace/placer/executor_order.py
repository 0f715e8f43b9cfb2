"""The order in which TensorFlow's executor (and the simulator) would run a placed graph's ops,
and when each tensor it sends between devices starts its transfer.

The liveness estimate of a final placement (:mod:`tfplace.placer.liveness`) replays its tensors in
this order: each device runs one op at a time, the ready op that became ready first (ties: Kahn
order), never idling while one is ready; an input from another device arrives its edge's transfer
time after its transfer starts. Each tensor is sent once per receiving device when its producer
ends, in the first moment from then on that the channels it takes (the sender's outgoing and the
receiver's incoming link, :func:`~tfplace.simulator.plan.route_channels`) are all free for the
link's occupancy: transfers sent earlier keep their time, and a transfer waiting for one busy
channel does not hold back a later one whose channels are free, as in the simulator. The receiver
holds the tensor from the start of its transfer, as the simulator allocates it; with many tensors
queued on a link, that start is long after the producer ended. A placer's own order (CPD-TOPO,
DFS-TOPO, Kahn) runs the devices one after another; the executor runs them side by side, so a
device may start the ops that are ready early (sources, the next layer's forward pass) long before
the placer's order reaches them and hold their outputs meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from heapq import heappop, heappush

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import kahn_order
from tfplace.core.transfer import TransferModel
from tfplace.placer.liveness import slot_size
from tfplace.placer.timeline import Timeline
from tfplace.simulator.plan import channel_count, route_channels

__all__ = ["ExecutorSchedule", "executor_order"]


@dataclass(frozen=True)
class ExecutorSchedule:
    """The list schedule of a placed graph (module docstring).

    ``order`` lists the ops by start time, ``start[op]`` is each op's start; ``transfers`` lists
    ``(start, arrival, producer, receiving device, bytes)`` of each tensor sent to each device.
    """

    order: list[int]
    start: list[float]
    transfers: list[tuple[float, float, int, int, int]]


def executor_order(graph: IndexedGraph, op_devices: Sequence[int], devices: DeviceSet) -> ExecutorSchedule:
    """The list schedule of ``op_devices`` (module docstring)."""
    n = len(graph)
    rank = [0] * n
    for position, op in enumerate(kahn_order(graph)):
        rank[op] = position
    count = len(devices.all_devices)
    links = [[devices.link(s, d) for d in range(count)] for s in range(count)]
    routes = [[route_channels(devices, s, d) for d in range(count)] for s in range(count)]
    channels = [Timeline() for _ in range(channel_count(devices))]
    compute: list[float] = graph.compute.tolist()
    succ, succ_bytes, succ_slots, output_sizes = (
        graph.succ,
        graph.succ_bytes,
        graph.succ_slots,
        graph.output_sizes,
    )
    waiting = [len(p) for p in graph.pred]
    ready_at = [0.0] * n
    arrivals: list[tuple[float, int, int]] = [(0.0, rank[v], v) for v in range(n) if not waiting[v]]
    arrivals.sort()
    finishes: list[tuple[float, int, int]] = []
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(count)]
    busy = [False] * count
    order: list[int] = []
    start = [0.0] * n
    transfers: list[tuple[float, float, int, int, int]] = []
    now = 0.0
    while len(order) < n:
        if finishes and (not arrivals or finishes[0][0] <= arrivals[0][0]):
            now, _, u = heappop(finishes)
            source = op_devices[u]
            busy[source] = False
            sent: dict[tuple[int, int], tuple[float, float]] = {}
            source_links, source_routes = links[source], routes[source]
            for w, nbytes, slots in zip(succ[u], succ_bytes[u], succ_slots[u]):
                target = op_devices[w]
                link = source_links[target]
                if link is None or not nbytes:
                    arrived = now if link is None else now + link.b  # a message: the fixed cost, no channel
                else:
                    arrived = 0.0
                    for tensor in slots or (-1 - w,):
                        key = (tensor, target)
                        if key not in sent:
                            size = nbytes if tensor < 0 else slot_size(output_sizes[u], tensor)
                            sent[key] = _send(channels, source_routes[target], now, link, size)
                            transfers.append((*sent[key], u, target, size))
                        arrived = max(arrived, sent[key][1])
                if arrived > ready_at[w]:
                    ready_at[w] = arrived
                waiting[w] -= 1
                if not waiting[w]:
                    heappush(arrivals, (ready_at[w], rank[w], w))
        else:
            now = arrivals[0][0]
        while arrivals and arrivals[0][0] <= now:
            entry = heappop(arrivals)
            heappush(queues[op_devices[entry[2]]], entry)
        if finishes and finishes[0][0] <= now:
            continue
        for d in range(count):
            if not busy[d] and queues[d]:
                _, _, v = heappop(queues[d])
                busy[d] = True
                order.append(v)
                start[v] = now
                heappush(finishes, (now + compute[v], rank[v], v))
    return ExecutorSchedule(order, start, transfers)


def _send(
    channels: list[Timeline], route: tuple[int, ...], produced: float, link: TransferModel, nbytes: int
) -> tuple[float, float]:
    """Reserve one transfer in the first slot from ``produced`` on that is free on every channel of
    its route; returns when it starts and when it arrives."""
    occupancy = link.occupancy(nbytes)
    start = produced
    while True:
        latest = max(channels[c].earliest_start(start, occupancy) for c in route)
        if latest == start:
            break
        start = latest
    for c in route:
        channels[c].reserve(start, occupancy)
    return start, start + link.time(nbytes)
