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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from heapq import heappop, heappush

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import kahn_order
from tfplace.core.transfer import TransferModel
from tfplace.placer.liveness import slot_size
from tfplace.simulator.plan import channel_count, route_channels

__all__ = ["ExecutorSchedule", "executor_order"]

#: Marks the moment a transfer leaves its channels (others waiting for them may start).
_CHANNELS_FREE = -1


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
    routes = [route_channels(devices, s, d) for s in range(count) for d in range(count)]
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
    start = [0.0] * n
    transfers: list[tuple[float, float, int, int, int]] = []
    queued: list[list[tuple[float, int, int]]] = [[] for _ in routes]  # (produced, rank, tensor) per route
    tensors: list[tuple[int, int, int, TransferModel]] = []  # (producer, receiver, bytes, link)
    receivers: list[list[int]] = []  # the consumers waiting for each tensor
    delivered: list[tuple[float, int]] = []  # (arrival, tensor) and (channels free, _CHANNELS_FREE)
    waiting_transfers = 0
    transfers_may_start = False  # a transfer was queued or a channel freed since the last attempt
    now = 0.0
    while len(order) < n:
        next_finish = finishes[0][0] if finishes else math.inf
        next_delivery = delivered[0][0] if delivered else math.inf
        if next_finish <= next_delivery and finishes and (not arrivals or next_finish <= arrivals[0][0]):
            now, _, u = heappop(finishes)
            source = op_devices[u]
            busy[source] = False
            sent: dict[tuple[int, int], int] = {}
            for w, nbytes, slots in zip(succ[u], succ_bytes[u], succ_slots[u]):
                target = op_devices[w]
                link = links[source][target]
                if link is not None and nbytes:
                    for tensor in slots or (-1 - w,):
                        key = (tensor, target)
                        if key not in sent:
                            size = nbytes if tensor < 0 else slot_size(output_sizes[u], tensor)
                            sent[key] = len(tensors)
                            heappush(queued[source * count + target], (now, rank[u], len(tensors)))
                            waiting_transfers += 1
                            transfers_may_start = True
                            tensors.append((u, target, size, link))
                            receivers.append([])
                        receivers[sent[key]].append(w)
                        waiting[w] += 1
                arrived = now if link is None else now + link.b if not nbytes else 0.0
                _arrive(w, arrived, now, ready_at, waiting, arrivals, queues[target], rank)
        elif next_delivery < math.inf and (not arrivals or next_delivery <= arrivals[0][0]):
            now, t = heappop(delivered)
            if t == _CHANNELS_FREE:
                transfers_may_start = True
            for w in receivers[t] if t != _CHANNELS_FREE else ():
                _arrive(w, now, now, ready_at, waiting, arrivals, queues[op_devices[w]], rank)
        else:
            now = arrivals[0][0]
        if (finishes and finishes[0][0] <= now) or (delivered and delivered[0][0] <= now):
            continue
        if waiting_transfers and transfers_may_start:
            waiting_transfers -= _start_transfers(
                queued, routes, channel_free, tensors, transfers, delivered, now
            )
            transfers_may_start = False
        while arrivals and arrivals[0][0] <= now:
            entry = heappop(arrivals)
            heappush(queues[op_devices[entry[2]]], entry)
        for d in range(count):
            if not busy[d] and queues[d]:
                _, _, v = heappop(queues[d])
                busy[d] = True
                order.append(v)
                start[v] = now
                heappush(finishes, (now + compute[v], rank[v], v))
    return ExecutorSchedule(order, start, transfers)


def _arrive(
    w: int,
    arrived: float,
    now: float,
    ready_at: list[float],
    waiting: list[int],
    arrivals: list[tuple[float, int, int]],
    queue: list[tuple[float, int, int]],
    rank: list[int],
) -> None:
    """One input of ``w`` is there at ``arrived``; the last makes ``w`` ready: it joins the ready
    ``queue`` of its device at once when ready by ``now`` (the same entry the ``arrivals`` heap
    would hand over at ``now``), else ``arrivals``."""
    if arrived > ready_at[w]:
        ready_at[w] = arrived
    waiting[w] -= 1
    if not waiting[w]:
        heappush(queue if ready_at[w] <= now else arrivals, (ready_at[w], rank[w], w))


def _start_transfers(
    queued: list[list[tuple[float, int, int]]],
    routes: list[tuple[int, ...]],
    channel_free: list[float],
    tensors: list[tuple[int, int, int, TransferModel]],
    transfers: list[tuple[float, float, int, int, int]],
    delivered: list[tuple[float, int]],
    now: float,
) -> int:
    """Start the queued transfers whose channels are all free at ``now``, first come first served
    by production (then Kahn rank); one waiting for a busy channel holds back no other. Returns
    how many started."""
    started = 0
    while True:
        best = -1
        for r, queue in enumerate(queued):
            first = best < 0 or (queue and queue[0] < queued[best][0])
            if queue and first and all(channel_free[c] <= now for c in routes[r]):
                best = r
        if best < 0:
            return started
        started += 1
        _, _, t = heappop(queued[best])
        producer, receiver, nbytes, link = tensors[t]
        for c in routes[best]:
            channel_free[c] = now + link.occupancy(nbytes)
        arrival = now + link.time(nbytes)
        transfers.append((now, arrival, producer, receiver, nbytes))
        heappush(delivered, (arrival, t))
        heappush(delivered, (now + link.occupancy(nbytes), _CHANNELS_FREE))
