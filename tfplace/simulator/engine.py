"""Event-driven simulation of one training step of a placed graph: the model every placer is scored by.

The rules, a model of how TensorFlow's executor runs a graph placed on several devices:

1. **Ops.** Each device runs one op at a time (a GPU's compute stream), for the op's
   ``compute_time``, and never idles while an op is ready on it. With ``devices.host_threads``
   set, a host (a process) instead runs up to that many ops at once, on any of its devices
   (TensorFlow's inter-op thread pool, which the virtual CPUs of one process share), so that a
   CPU device may run several ops at once. An op is *ready* on its device
   once every input has arrived there. Among its ready ops a device starts the one ``priority``
   ranks first: ``"fifo"`` (earliest ready time, like TensorFlow's executor), ``"critical_path"``
   (largest ``blevel``, Eq. 3 of the paper, computed on the graph's edge times), or an explicit
   rank per op (lower runs first), which replays a placer's own schedule order. Ties go to the
   earlier op of the Kahn topological order. With ``inline_ops``, a device follows TensorFlow's
   executor on CPUs instead (``ExecutorState::ScheduleReady``): the ops that become ready when an
   op ends go, in the order of its out-edges, to the device thread's *inline* queue (first in,
   first out) if their kernel is inexpensive; of the others, the last goes inline too when that
   queue is empty and the rest to the thread pool, whose tasks a device runs when its inline
   queue is empty, last in first out (a worker thread pushes its tasks to the front of its own
   queue). The step's first ops are made ready so by each device's source node; ops made ready by
   an arriving tensor or message go to the pool. The threads of a host serve its devices' queues
   together: an idle thread takes the first task of any of them (the pool's is shared).
2. **Transfers.** A tensor is an (op, output slot) pair; an edge that carries bytes without naming
   a slot is a tensor of its own. When its producer ends, a tensor is sent *once* to each other
   device that has a consumer of it. The transfer takes ``k * bytes + b`` on the
   :meth:`~tfplace.core.devices.DeviceSet.link` between the devices (``b`` once per transfer an edge
   of a coarse graph stands for) and occupies, for all of it but the link's ``latency``
   (:meth:`~tfplace.core.transfer.TransferModel.occupancy`; the tensor arrives ``latency`` after
   leaving the channels, so transfers sent together overlap their latencies), the channels of
   :func:`~tfplace.simulator.plan.route_channels`: the sender's outgoing and the receiver's
   incoming channel (full duplex: one transfer per direction per device at a time), plus both
   hosts' network channels between hosts, and only the device's own channel between a host's CPU
   (its memory, which feeds all its devices' links at once) and another device of that host;
   with ``devices.shared_bus`` every transfer inside a host takes the host's single bus instead. A transfer starts as soon as its tensor exists and
   all its channels are free. Transfers waiting for channels are served first come, first
   served by the time their tensor was produced (ties: the producer's topological position);
   a waiting transfer does not hold back a later one whose channels are free.
   On a link whose devices do the transfers' work themselves (``copy_k`` or ``copy_b`` set: gRPC
   between processes on CPUs), a transfer takes no channel: it is a *send* task on the sender,
   queued when the tensor is produced, and a *receive* task queued on the receiver when the send
   starts, each holding its device for ``copy_b + copy_k * bytes`` (Celeritas section 6.1 adds
   such tasks to the devices; ``copy_b`` is what a split training step's tensors cost each side
   on average, ``tfplace calibrate``, ``docs/experiments.md``); the tensor arrives
   ``b - copy_b + (k - copy_k) * bytes`` after both have ended (the request's round trip and the
   wire, which hold neither device).
   With ``devices.cores`` set, all devices share that many processors (loopback workers of one
   machine): an op and a send task also need an idle processor, and a receive task needs only
   an idle processor, not its device (the receiving process deserializes on its RPC threads
   while its executor runs ops). A device runs these copy tasks only when no op is
   ready on it, first come first served: TensorFlow's executor keeps running the ops it has
   ready, and the callbacks that serialize a requested tensor or take in a received one wait
   for its thread (seen in traces of one-thread workers: a worker serves the tensors a peer
   asked for only once it runs out of ready ops).
3. **Control dependencies.** Across devices a control dependency (or a tensor of 0 bytes) is a
   message that arrives after the link's latency ``b`` and occupies no channel; on one device
   it is satisfied when the producer ends. On a link whose devices do the transfers' work it is
   an empty tensor sent like any other (send and receive tasks of ``copy_b``), once per producer
   and receiving device: TensorFlow's graph partitioning sends it as a ``_Send``/``_Recv`` pair.
   A constant of at most 16 elements on a CPU whose consumers are on several CPU devices, and from
   which no control edge leaves, is one copy on each of those devices, each waiting for every
   control input of the original (TensorFlow's ``ReplicateConstantsPass``): it sends no tensor,
   and each of its control inputs sends a message to every other device of a copy
   (:func:`~tfplace.simulator.plan.replicated_constants`).
4. **Memory.** A device holds the persistent bytes of its ops from time 0. An op allocates its
   outputs and its temporary bytes when it starts and frees the temporary bytes when it ends.
   An output slot is freed when the last of its consumers on the device and of its transfers
   has finished; a slot nobody consumes is freed when the op ends. An output slot that is an
   input's buffer (``aliased_outputs``: an ``Identity``, an in-place ``Relu``) allocates nothing;
   instead the input's buffer (or the copy received on the op's device) is kept until that slot
   would have been freed, so a buffer lives as long as any tensor that is it is in use. A received
   tensor is allocated on the receiver when its transfer starts and freed when its last consumer
   there ends; with ``devices.shared_host_memory`` a tensor received from a device of the same
   host is the sender's buffer instead, kept until its last consumer on either device ends. Frees at a moment happen before the allocations of ops and transfers starting then.
   The first time a device holds more than ``devices.memory_of(d)``, an :class:`OomEvent`
   names the op whose start (or received tensor) crossed the limit; the simulation goes on.
   With ``devices.cores`` set, when a received tensor is taken in is a race between the RPC
   threads and the executors' on the shared cores, which the operating system's time slices
   decide: TensorFlow's workers take a tensor in while their thread computes in some steps and
   only once their thread runs out of ready ops in others. The order of a device's ops, and so
   its peak, follows the race (Inception V3's loopback split held 236.78 MB in most real steps
   and 188-197 MB in the others), so each device's peak, and its overflow, is the larger of
   this schedule's and of the same step's with a processor per device (``cores=0``: every
   receive waits for its device), the race's two ends; the makespan is this schedule's.
5. **Step overhead.** The framework's own work per step (starting each host's part of the step
   and collecting it: a TensorFlow master's ``RunGraph`` call to every worker) adds
   ``devices.step_overhead`` seconds per host that runs ops to the makespan.

The loop keeps a heap of events (op ends, transfer ends, message arrivals), a heap of ready ops
per device and a heap of waiting transfers per route (sender, receiver), so each event costs
``O(log n)`` plus the routes sharing a channel: 200,000 ops simulate in seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from heapq import heappop, heappush

import networkx as nx
import numpy as np

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph, index_graph
from tfplace.core.orders import bottom_levels, kahn_order
from tfplace.core.simulated_step import (
    MemoryTrace,
    OomEvent,
    OpTask,
    Schedule,
    SimulationResult,
    TransferTask,
)
from tfplace.simulator.plan import TransferPlan, plan_transfers

__all__ = ["PRIORITIES", "simulate"]

#: The named ready-op priorities :func:`simulate` accepts (besides an explicit rank per op).
PRIORITIES = ("fifo", "critical_path")

_OP_END, _TRANSFER_END, _SIGNAL, _ARRIVAL, _SEND_END, _RECEIVE_END = 0, 1, 2, 3, 4, 5

_NO_TASK = (math.inf, math.inf, 0)
"""Sorts after every queued task: a device whose queue is empty."""


def simulate(
    graph: IndexedGraph | nx.DiGraph,
    op_devices: np.ndarray | Sequence[int] | Mapping[str, str],
    devices: DeviceSet,
    *,
    priority: str | Sequence[float] | np.ndarray = "fifo",
    inline_ops: Sequence[bool] | np.ndarray | None = None,
    record: bool = False,
) -> SimulationResult:
    """Simulate one step of ``graph`` with op ``i`` on ``devices.all_devices[op_devices[i]]``.

    Parameters
    ----------
    graph : IndexedGraph or CostGraph
        The ops and dependencies; a cost graph is indexed with ``devices.typical_link`` (as
        :func:`tfplace.placer.place_cost_graph` does), which sets the edge times of ``ccr`` and
        of the ``"critical_path"`` priority. Transfers always use the devices' own links.
    op_devices : array of int, or mapping of str to str
        Device index of each op into ``devices.all_devices``, or op name -> device name.
    devices : DeviceSet
        Targets and fallback CPUs, their memory and links.
    priority : {"fifo", "critical_path"} or sequence of float
        Which ready op a device runs first (rule 1 of the module docstring); a sequence gives each
        op's rank, lower first.
    inline_ops : sequence of bool, optional
        Which ops TensorFlow's CPU executor runs inline (their kernels declare themselves
        inexpensive: :func:`tfplace.core.device_model.inline_ops`); with it, the devices pick their
        ready ops as that executor does (rule 1 of the module docstring) instead of by ``priority``,
        which must then be ``"fifo"``.
    record : bool
        Keep the schedule (op and transfer tasks, memory over time) in ``result.schedule``.

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError
        When ``op_devices`` or ``priority`` do not fit the graph (the message names the op).
    tfplace.core.costgraph.CostGraphError
        When the graph has a cycle or an edge names an output slot its producer lacks.
    tfplace.core.devices.DeviceError
        When a mapping names an unknown device.

    Examples
    --------
    >>> from tfplace.core.costgraph import CostGraph
    >>> g = CostGraph()
    >>> g.add_op("a", compute_time=1.0, output_sizes=(1000,))
    >>> g.add_op("b", compute_time=2.0)
    >>> g.add_dependency("a", "b", slots=(0,))
    >>> devices = DeviceSet.parse("/device:GPU:0-1", "1GB")
    >>> simulate(g, {"a": "/device:GPU:0", "b": "/device:GPU:0"}, devices).makespan
    3.0
    """
    indexed = graph if isinstance(graph, IndexedGraph) else index_graph(graph, devices.typical_link)
    placed = _resolve_devices(indexed, op_devices, devices)
    order = kahn_order(indexed)
    position = [0] * len(indexed)
    for rank, op in enumerate(order):
        position[op] = rank
    keys = _static_keys(indexed, priority, order)
    inline = None
    if inline_ops is not None:
        inline = np.asarray(inline_ops, dtype=bool).tolist()
        if len(inline) != len(indexed):
            raise ValueError(f"inline_ops has {len(inline)} entries; the graph has {len(indexed)} ops")
        if keys is not None:
            raise ValueError("inline_ops replaces the priority: give priority='fifo' with it")
    plan = plan_transfers(indexed, placed, devices)
    result = _Run(indexed, placed, devices, plan, position, keys, record, inline).result()
    if not devices.cores:
        return result
    own_processors = dataclasses.replace(devices, cores=0)
    other_end = _Run(indexed, placed, own_processors, plan, position, keys, False, inline).result()
    return _peak_of_either_order(result, other_end)


def _peak_of_either_order(result: SimulationResult, other: SimulationResult) -> SimulationResult:
    """``result`` with each device's peak, and first overflow, the larger of its own and of
    ``other``'s, the same step in another order (rule 4: a receive's race on shared cores)."""
    overflowed = {event.device for event in result.oom}
    oom = result.oom + [event for event in other.oom if event.device not in overflowed]
    return dataclasses.replace(
        result,
        peak_memory=np.maximum(result.peak_memory, other.peak_memory),
        oom=sorted(oom, key=lambda event: event.time),
    )


def _resolve_devices(
    graph: IndexedGraph, op_devices: np.ndarray | Sequence[int] | Mapping[str, str], devices: DeviceSet
) -> list[int]:
    """Device index of every op, checked against the graph and the device set."""
    n = len(graph)
    if isinstance(op_devices, Mapping):
        missing = [name for name in graph.names if name not in op_devices]
        unknown = [name for name in op_devices if name not in graph.index]
        if missing or unknown:
            problems = [f"no device for {len(missing)} ops ({', '.join(missing[:5])})"] if missing else []
            problems += [f"{len(unknown)} unknown ops ({', '.join(unknown[:5])})"] if unknown else []
            raise ValueError(f"op_devices does not match the graph: {'; '.join(problems)}")
        index = {name: devices.index(name) for name in set(op_devices.values())}
        return [index[op_devices[name]] for name in graph.names]
    array = np.asarray(op_devices)
    if array.shape != (n,):
        raise ValueError(f"op_devices has shape {array.shape}; the graph has {n} ops")
    if n and array.dtype.kind not in "iu":
        raise ValueError(f"op_devices must hold integer device indices, got dtype {array.dtype}")
    bad = np.flatnonzero((array < 0) | (array >= len(devices.all_devices)))
    if bad.size:
        op = int(bad[0])
        raise ValueError(
            f"op {graph.names[op]!r} is on device {int(array[op])}; "
            f"valid indices are 0..{len(devices.all_devices) - 1}"
        )
    placed: list[int] = array.astype(np.int64).tolist()
    return placed


def _static_keys(
    graph: IndexedGraph, priority: str | Sequence[float] | np.ndarray, order: list[int]
) -> list[float] | None:
    """Each op's fixed priority key (lower runs first), or ``None`` for ``"fifo"`` (ready time)."""
    if isinstance(priority, str):
        if priority == "fifo":
            return None
        if priority == "critical_path":
            keys: list[float] = (-bottom_levels(graph, order)).tolist()
            return keys
        raise ValueError(f"unknown priority {priority!r}; use one of {PRIORITIES} or a rank per op")
    ranks = np.asarray(priority, dtype=float)
    if ranks.shape != (len(graph),):
        raise ValueError(f"priority ranks have shape {ranks.shape}; the graph has {len(graph)} ops")
    if not np.isfinite(ranks).all():
        op = int(np.flatnonzero(~np.isfinite(ranks))[0])
        raise ValueError(f"priority rank of op {graph.names[op]!r} is {ranks[op]}, not a finite number")
    return ranks.tolist()  # type: ignore[no-any-return]


class _Run:
    """One simulation: the state of devices, channels and memory, advanced event by event."""

    def __init__(
        self,
        graph: IndexedGraph,
        placed: list[int],
        devices: DeviceSet,
        plan: TransferPlan,
        position: list[int],
        keys: list[float] | None,
        record: bool,
        inline: list[bool] | None = None,
    ) -> None:
        self.graph, self.placed, self.devices, self.plan = graph, placed, devices, plan
        self.position, self.keys, self.record, self.inline = position, keys, record, inline
        count = len(devices.all_devices)
        self.capacity = [devices.memory_of(d) for d in range(count)]
        self.in_use = [0] * count
        self.oom: list[OomEvent] = []
        self.overflowed = [False] * count
        self.op_tasks: list[OpTask] = []
        self.transfer_tasks: list[TransferTask] = []
        self.sample_times: list[list[float]] = [[] for _ in range(count)]
        self.sample_bytes: list[list[int]] = [[] for _ in range(count)]
        persistent = graph.persistent.tolist()
        for op, d in enumerate(placed):
            self.in_use[d] += persistent[op]
        self.peak = list(self.in_use)
        for d in range(count):
            if self.in_use[d] > self.capacity[d]:
                self._persistent_overflow(d, persistent)
            if record:
                self._sample(d, 0.0)

    def _persistent_overflow(self, device: int, persistent: list[int]) -> None:
        """Name the op whose persistent bytes, added in graph order, cross the device's memory."""
        held = 0
        for op, d in enumerate(self.placed):
            if d == device:
                held += persistent[op]
                if held > self.capacity[d]:
                    self._overflow(d, op, 0.0, "persistent")
                    return

    def _overflow(self, device: int, op: int, time: float, cause: str) -> None:
        self.overflowed[device] = True
        self.oom.append(
            OomEvent(
                device=self.devices.all_devices[device].name,
                op=self.graph.names[op],
                time=time,
                bytes_in_use=self.in_use[device],
                capacity=self.capacity[device],
                cause=cause,
            )
        )

    def _allocate(self, device: int, nbytes: int, time: float, op: int, cause: str) -> None:
        """Add ``nbytes`` to a device's memory at ``time``; ``op`` and ``cause`` name an overflow."""
        in_use = self.in_use[device] + nbytes
        self.in_use[device] = in_use
        if in_use > self.peak[device]:
            self.peak[device] = in_use
            if in_use > self.capacity[device] and not self.overflowed[device]:
                self._overflow(device, op, time, cause)
        if self.record and nbytes:
            self._sample(device, time)

    def _free(self, device: int, nbytes: int, time: float) -> None:
        self.in_use[device] -= nbytes
        if self.record and nbytes:
            self._sample(device, time)

    def _sample(self, device: int, time: float) -> None:
        self.sample_times[device].append(time)
        self.sample_bytes[device].append(self.in_use[device])

    def result(self) -> SimulationResult:
        makespan, moved, seconds = self._loop()
        graph, devices = self.graph, self.devices
        overhead = devices.step_overhead * len({devices.host_of(d) for d in set(self.placed)})
        count = len(devices.all_devices)
        plan = self.plan
        link_bytes = np.zeros((count, count), dtype=np.int64)
        np.add.at(link_bytes, (plan.src, plan.dst), plan.nbytes)
        compute = float(graph.compute.sum())
        communication = float(sum(sum(times) for times in graph.succ_time))
        schedule = None
        if self.record:
            memory = [
                MemoryTrace(np.asarray(times, dtype=float), np.asarray(sizes, dtype=np.int64))
                for times, sizes in zip(self.sample_times, self.sample_bytes)
            ]
            transfers = sorted(self.transfer_tasks, key=lambda task: task.start)
            schedule = Schedule(ops=self.op_tasks, transfers=transfers, memory=memory)
        return SimulationResult(
            makespan=makespan + overhead,
            busy_time=np.bincount(self.placed, weights=graph.compute, minlength=count).astype(float),
            peak_memory=np.asarray(self.peak, dtype=np.int64),
            bytes_moved=moved,
            link_bytes=link_bytes,
            transfers=len(plan.producer),
            transfer_seconds=seconds,
            ccr=communication / compute if compute > 0 else math.inf,
            placed_ccr=seconds / compute if compute > 0 else math.inf,
            oom=sorted(self.oom, key=lambda event: event.time),
            schedule=schedule,
            step_overhead=overhead,
        )

    def _transfer_task(self, t: int, start: float, end: float) -> TransferTask:
        plan = self.plan
        producer = self.graph.names[plan.producer[t]]
        return TransferTask(producer, plan.slot[t], plan.src[t], plan.dst[t], plan.nbytes[t], start, end)

    def _loop(self) -> tuple[float, int, float]:
        """Run every op; return the makespan, the bytes moved and the summed transfer seconds."""
        graph, plan, placed, position, keys = self.graph, self.plan, self.placed, self.position, self.keys
        names, record, allocate, free = graph.names, self.record, self._allocate, self._free
        compute = graph.compute.tolist()
        footprint = (graph.outputs + graph.temporary).tolist()
        temporary = graph.temporary.tolist()
        slot_counts = [len(sizes) for sizes in graph.output_sizes]
        pending, local_next, sends, signals = plan.pending[:], plan.local_next, plan.sends, plan.signals
        releases, slot_base, holders = plan.releases, plan.slot_base, plan.holders[:]
        buffer_size, buffer_device, parent = plan.buffer_size, plan.buffer_device, plan.parent
        route_of, duration, delay, consumers = plan.route, plan.duration, plan.delay, plan.consumers
        on_devices, n = plan.on_devices, len(graph)
        parts_left = [2] * len(on_devices)  # a copy on the devices ends when its send and receive do
        copy_order = itertools.count()  # copies run after every ready op, first come first served
        cores, threads = self.devices.cores, self.devices.host_threads
        idle_cores = float(cores) if cores else math.inf
        count = len(self.devices.all_devices)
        hosts = [self.devices.host_of(d) for d in range(count)]
        host = [hosts.index(name) for name in hosts]  # a host's number: its first device's
        idle_threads = [float(threads) if threads else math.inf] * count  # indexed by host
        per_device = math.inf if threads else 1  # tasks a device runs at once
        starved: set[int] = set()  # devices with a task ready but no idle core
        receptions: list[tuple[int, int]] = []  # receive tasks waiting for a core (shared cores)
        sent_at = [0.0] * len(on_devices)
        route_channels, channel_routes = plan.route_channels, plan.channel_routes
        queues: list[list[tuple[float, int, int]]] = [[] for _ in range(count)]
        running = [0] * count
        inline = self.inline
        inline_waiting = [0] * count  # ops each device's thread runs next, before the pool's
        arrival = itertools.count(1)
        waiting: list[list[tuple[float, int, int]]] = [[] for _ in plan.routes]
        blocked = [0] * len(plan.routes)  # busy channels among each route's
        events: list[tuple[float, int, int]] = []
        ready_devices: set[int] = set()
        ready_routes: set[int] = set()
        moved, seconds, now = 0, 0.0, 0.0

        def drop(buffer: int, time: float) -> None:
            """Free a buffer nobody holds any more, then release the buffer it is an alias of."""
            while True:
                free(buffer_device[buffer], buffer_size[buffer], time)
                buffer = parent.get(buffer, -1)
                if buffer < 0:
                    return
                holders[buffer] -= 1
                if holders[buffer]:
                    return

        def release(buffer: int, time: float) -> None:
            holders[buffer] -= 1
            if not holders[buffer]:
                drop(buffer, time)

        def make_ready(v: int, time: float) -> None:
            d = placed[v]
            heappush(queues[d], (time if keys is None else keys[v], position[v], v))
            ready_devices.add(d)

        def to_pool(v: int) -> None:
            heappush(queues[placed[v]], (1, -next(arrival), v))
            ready_devices.add(placed[v])

        def to_inline(v: int) -> None:
            heappush(queues[placed[v]], (0, next(arrival), v))
            inline_waiting[placed[v]] += 1
            ready_devices.add(placed[v])

        def schedule(ready: list[int], time: float, by_op: bool) -> None:
            """Queue the ops that became ready together (rule 1 of the module docstring)."""
            if inline is None:
                for v in ready:
                    make_ready(v, time)
            elif not by_op:  # an arrival's callback hands every op to the thread pool
                for v in ready:
                    to_pool(v)
            else:
                expensive = -1
                for v in ready:
                    if inline[v]:
                        to_inline(v)
                        continue
                    if expensive >= 0:
                        to_pool(expensive)
                    expensive = v
                if expensive >= 0:
                    if inline_waiting[placed[expensive]]:
                        to_pool(expensive)
                    else:
                        to_inline(expensive)

        def deliver(t: int, time: float) -> None:
            ready = []
            for v in consumers[t]:
                pending[v] -= 1
                if not pending[v]:
                    ready.append(v)
            schedule(ready, time, False)

        def release_core(device: int = -1) -> None:
            """A task ended: its processor, and its device's slot and host thread (when it had
            one), are free again."""
            nonlocal idle_cores
            idle_cores += 1
            if device >= 0:
                running[device] -= 1
                idle_threads[host[device]] += 1
                ready_devices.add(device)
            ready_devices.update(starved)
            starved.clear()

        def part_done(t: int, time: float) -> None:
            """One of a copy's two tasks ended; after both, the tensor is on its way."""
            parts_left[t] -= 1
            if parts_left[t]:
                return
            if record:
                self.transfer_tasks.append(self._transfer_task(t, sent_at[t], time))
            if delay[t]:
                heappush(events, (time + delay[t], _ARRIVAL, t))
            else:
                deliver(t, time)

        roots: list[list[int]] = [[] for _ in range(count)]
        for v in range(len(graph)):
            if not pending[v]:
                roots[placed[v]].append(v)
        for device_roots in roots:  # made ready by each device's source node
            schedule(device_roots, 0.0, True)
        while True:
            while ready_devices:
                if inline is None:
                    d = ready_devices.pop()
                else:  # threads shared by a host's devices take the first task of any of them
                    d = min(ready_devices, key=lambda d: queues[d][0] if queues[d] else _NO_TASK)
                    ready_devices.remove(d)
                if running[d] >= per_device or not queues[d]:
                    continue
                if not idle_cores or not idle_threads[host[d]]:
                    starved.add(d)
                    continue
                key, _, u = heappop(queues[d])
                if inline is not None and key == 0:
                    inline_waiting[d] -= 1
                running[d] += 1
                idle_threads[host[d]] -= 1
                idle_cores -= 1
                ready_devices.add(d)  # it may start another task at once
                if u < n:
                    end = now + compute[u]
                    allocate(d, footprint[u], now, u, "start")
                    heappush(events, (end, _OP_END, u))
                    if record:
                        self.op_tasks.append(OpTask(names[u], d, now, end))
                    continue
                t, receiving = divmod(u - n, 2)
                if receiving:
                    allocate(d, buffer_size[plan.buffer[t]], now, plan.producer[t], "receive")
                    heappush(events, (now + duration[t], _RECEIVE_END, t))
                    continue
                sent_at[t] = now
                moved += plan.nbytes[t]
                seconds += duration[t] + delay[t]
                heappush(events, (now + duration[t], _SEND_END, t))
                if cores:
                    heappush(receptions, (next(copy_order), t))
                else:
                    heappush(queues[plan.dst[t]], (math.inf, next(copy_order), u + 1))
                    ready_devices.add(plan.dst[t])
            while receptions and idle_cores:
                t = heappop(receptions)[1]
                idle_cores -= 1
                allocate(plan.dst[t], buffer_size[plan.buffer[t]], now, plan.producer[t], "receive")
                heappush(events, (now + duration[t], _RECEIVE_END, t))
            candidates = [r for r in ready_routes if waiting[r]]
            ready_routes.clear()
            while candidates:
                best, best_head = -1, (math.inf, 0, 0)
                for r in candidates:
                    queue = waiting[r]
                    if queue and not blocked[r] and queue[0] < best_head:
                        best, best_head = r, queue[0]
                if best < 0:
                    break
                t = heappop(waiting[best])[2]
                for c in route_channels[best]:
                    for r in channel_routes[c]:
                        blocked[r] += 1
                end = now + duration[t]
                allocate(plan.dst[t], buffer_size[plan.buffer[t]], now, plan.producer[t], "receive")
                heappush(events, (end, _TRANSFER_END, t))
                moved += plan.nbytes[t]
                seconds += duration[t] + delay[t]
                if record:
                    self.transfer_tasks.append(self._transfer_task(t, now, end))
            if not events:
                return now, moved, seconds
            now = events[0][0]
            while events and events[0][0] <= now:
                _, kind, x = heappop(events)
                if kind == _OP_END:
                    d = placed[x]
                    release_core(d)
                    free(d, temporary[x], now)
                    base = slot_base[x]
                    for buffer in range(base, base + slot_counts[x]):
                        if not holders[buffer]:
                            drop(buffer, now)
                    for buffer in releases[x]:
                        release(buffer, now)
                    ready = []
                    for v in local_next[x]:
                        pending[v] -= 1
                        if not pending[v]:
                            ready.append(v)
                    schedule(ready, now, True)
                    for t in sends[x]:
                        if on_devices[t]:
                            heappush(queues[d], (math.inf, next(copy_order), n + 2 * t))
                        else:
                            heappush(waiting[route_of[t]], (now, position[x], t))
                            ready_routes.add(route_of[t])
                    for v, latency in signals[x]:
                        heappush(events, (now + latency, _SIGNAL, v))
                elif kind == _TRANSFER_END:
                    for c in route_channels[route_of[x]]:
                        for r in channel_routes[c]:
                            blocked[r] -= 1
                            ready_routes.add(r)
                    for buffer in plan.holds[x]:
                        release(buffer, now)
                    if delay[x]:
                        heappush(events, (now + delay[x], _ARRIVAL, x))
                    else:
                        deliver(x, now)
                elif kind == _ARRIVAL:
                    deliver(x, now)
                elif kind in (_SEND_END, _RECEIVE_END):
                    if kind == _SEND_END:
                        release_core(plan.src[x])
                        for buffer in plan.holds[x]:
                            release(buffer, now)
                    else:  # with shared cores a receive task held only a processor
                        release_core(-1 if cores else plan.dst[x])
                    part_done(x, now)
                else:
                    pending[x] -= 1
                    if not pending[x]:
                        schedule([x], now, False)
