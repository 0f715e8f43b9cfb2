"""The order in which TensorFlow's executor (and the simulator) would run a placed graph's ops.

The liveness estimate of a final placement (:mod:`tfplace.placer.liveness`) replays its tensors in
this order: each device runs one op at a time, the ready op that became ready first (ties: Kahn
order), never idling while one is ready; an input from another device arrives its edge's transfer
time after its producer ends, sent once per tensor and receiving device and queued, in the order
the producers end, behind the transfers on the same channels (the sender's outgoing and the
receiver's incoming link, :func:`~tfplace.simulator.plan.route_channels`) for the link's
occupancy. A placer's own order (CPD-TOPO,
DFS-TOPO, Kahn) runs the devices one after another; the executor runs them side by side, so a
device may start the ops that are ready early (sources, the next layer's forward pass) long before
the placer's order reaches them and hold their outputs meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappop, heappush

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import kahn_order
from tfplace.core.transfer import TransferModel
from tfplace.placer.liveness import slot_size
from tfplace.simulator.plan import channel_count, route_channels

__all__ = ["executor_order"]


def executor_order(graph: IndexedGraph, op_devices: Sequence[int], devices: DeviceSet) -> list[int]:
    """Ops in the order of their start on a list schedule of ``op_devices`` (module docstring)."""
    n = len(graph)
    rank = [0] * n
    for position, op in enumerate(kahn_order(graph)):
        rank[op] = position
    count = len(devices.all_devices)
    links = [[devices.link(s, d) for d in range(count)] for s in range(count)]
    routes = [[route_channels(devices, s, d) for d in range(count)] for s in range(count)]
    channel_free = [0.0] * channel_count(devices)
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
    now = 0.0
    while len(order) < n:
        if finishes and (not arrivals or finishes[0][0] <= arrivals[0][0]):
            now, _, u = heappop(finishes)
            source = op_devices[u]
            busy[source] = False
            sent: dict[tuple[int, int], float] = {}
            source_links, source_routes = links[source], routes[source]
            for w, nbytes, slots in zip(succ[u], succ_bytes[u], succ_slots[u]):
                target = op_devices[w]
                link = source_links[target]
                if link is None or not nbytes:
                    arrived = now if link is None else now + link.latency
                else:
                    arrived = 0.0
                    for tensor in slots or (-1 - w,):
                        key = (tensor, target)
                        if key not in sent:
                            size = nbytes if tensor < 0 else slot_size(output_sizes[u], tensor)
                            sent[key] = _send(channel_free, source_routes[target], now, link, size)
                        arrived = max(arrived, sent[key])
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
                heappush(finishes, (now + compute[v], rank[v], v))
    return order


def _send(
    channel_free: list[float], channels: tuple[int, ...], produced: float, link: TransferModel, nbytes: int
) -> float:
    """Queue one transfer behind those on its channels; returns when it arrives."""
    start = max(produced, *(channel_free[c] for c in channels))
    for c in channels:
        channel_free[c] = start + link.occupancy(nbytes)
    return start + link.time(nbytes)
