"""What a placement makes each op wait for, send and hold: the static part of a simulation.

Given where every op runs, :func:`plan_transfers` turns the graph's edges into

* *local deliveries*: an edge between two ops of one device, satisfied when the producer ends;
* *transfers*: a tensor (producer op, output slot) sent once to each other device that has a
  consumer of it; an edge that carries bytes without naming a slot is a tensor of its own;
* *signals*: a control dependency, or a tensor of 0 bytes, between two devices: a message that
  costs the link's latency ``b`` and occupies no channel; on a link whose devices do the transfers'
  work (``device_copies``: gRPC between CPU workers) it is a *transfer* of 0 bytes instead, one per
  producer and receiving device, since TensorFlow's graph partitioning sends a control dependency
  between devices as an empty tensor (a ``_Send``/``_Recv`` pair, shared by the producer's control
  edges to one device), and each costs both workers a ``RecvTensor`` call like any tensor (the small
  NMT split over two workers: 84 tensors and 15 such messages, 98 ``RecvTensor`` calls per step;
  Tensor Holography's batch-norm updates: 60 and 49, 105 calls);
* *replicated constants*: a small CPU constant consumed on several CPU devices sends nothing; TensorFlow's
  ``ReplicateConstantsPass`` puts a copy on each consumer's device, each waiting for every control
  input of the original, so those control inputs signal every device of a copy instead
  (:func:`replicated_constants`; Inception V3's four optimizer constants wait on 188 batch-norm
  updates: its ``auto`` placement over two workers makes 219 ``RecvTensor`` calls per step, 218
  simulated this way, 54 without);
* *buffers*: each output slot of each op on its device, and each received tensor on its receiver,
  with the number of holders that must release it before it is freed (between devices of a host
  with ``shared_host_memory``, a received tensor is a buffer of 0 bytes holding the sender's); an output slot that is an
  input's buffer (the graph's ``aliased_outputs``) is a buffer of 0 bytes that holds that input's
  buffer (its *parent*: the producer's slot on the same device, else the received copy) until it is
  released itself;
* *routes*: the (sender, receiver) device pairs, each with the channels its transfers occupy.

The event loop in :mod:`tfplace.simulator.engine` only follows these lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfplace.core.costgraph import CostGraphError
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.transfer import TransferModel

__all__ = ["TransferPlan", "channel_count", "plan_transfers", "replicated_constants", "route_channels"]


@dataclass(frozen=True)
class TransferPlan:
    """Per-op, per-transfer and per-buffer lists of one placed graph; op ``i`` is ``graph.names[i]``.

    Ops
        ``pending[v]`` deliveries op ``v`` waits for; ``local_next[u]`` the consumers of ``u`` on
        its device (one delivery each when ``u`` ends); ``sends[u]`` the transfers ``u`` starts
        queueing when it ends; ``signals[u]`` the ``(consumer, latency)`` messages it sends then;
        ``releases[v]`` the buffers ``v`` stops holding when it ends.
    Buffers
        ``slot_base[u] + s`` is the buffer of output slot ``s`` of ``u``; every buffer has a size,
        a device and ``holders`` (the releases it waits for; ``0`` frees it when its op ends).
        ``parent[b]`` is the buffer an aliased output slot's buffer ``b`` is; ``b`` holds it
        (one of its ``holders``) and releases it when ``b`` itself is freed.
    Transfers (one entry per tensor and receiving device)
        ``producer``, ``slot`` (``None`` for a slotless edge), ``src``, ``dst`` devices, ``nbytes``,
        ``duration`` (how long it holds its channels: ``k * bytes + b - latency``, the fixed part
        once per transfer the edge stands for), ``delay`` (the link's ``latency``: the tensor
        arrives that long after it leaves the channels), ``on_devices`` (the link's
        ``device_copies``: the transfer runs as a task on ``src`` and one on ``dst``, each of
        ``duration = copy_k * bytes + copy_b``, instead of on channels; ``delay`` is then
        ``b - copy_b + (k - copy_k) * bytes``), ``route``,
        ``holds`` (the sender's buffers it reads), ``consumers`` (ops it delivers to) and
        ``buffer`` (the received copy on ``dst``).
    Routes
        ``routes[r]`` is the ``(src, dst)`` pair, ``route_channels[r]`` the channels it occupies and
        ``channel_routes[c]`` the routes that use channel ``c``.
    """

    pending: list[int]
    local_next: list[list[int]]
    sends: list[list[int]]
    signals: list[list[tuple[int, float]]]
    releases: list[list[int]]
    slot_base: list[int]
    buffer_size: list[int]
    buffer_device: list[int]
    holders: list[int]
    channel_routes: list[list[int]]
    parent: dict[int, int] = field(default_factory=dict)
    producer: list[int] = field(default_factory=list)
    slot: list[int | None] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    delay: list[float] = field(default_factory=list)
    on_devices: list[bool] = field(default_factory=list)
    route: list[int] = field(default_factory=list)
    holds: list[Sequence[int]] = field(default_factory=list)
    consumers: list[list[int]] = field(default_factory=list)
    buffer: list[int] = field(default_factory=list)
    routes: list[tuple[int, int]] = field(default_factory=list)
    route_channels: list[tuple[int, ...]] = field(default_factory=list)


def route_channels(devices: DeviceSet, src: int, dst: int) -> tuple[int, ...]:
    """The channels a transfer from device ``src`` to ``dst`` occupies for its whole duration.

    With ``D = len(devices.all_devices)`` devices and ``H`` hosts (in order of first appearance),
    channel ``d`` is device ``d``'s outgoing link, ``D + d`` its incoming link, ``2D + h`` host
    ``h``'s shared bus, ``2D + H + h`` its network-out and ``2D + 2H + h`` its network-in channel.
    Inside a host a transfer takes the sender's out and the receiver's in channel (full duplex),
    or the host's one bus when ``devices.shared_bus``; between hosts it takes the sender's out, the
    receiver's in and both hosts' network channels. Between a host's CPU (its memory) and one of
    its other devices, a transfer takes only that device's channel: each GPU has its own link to
    the host, and host memory serves all of them at once (a fed batch's slices, sent to every GPU
    together, :mod:`tfplace.split.feeds`); with ``devices.shared_bus`` they share the bus.
    """
    count = len(devices.all_devices)
    hosts = list(dict.fromkeys(devices.host_of(d) for d in range(count)))
    src_host, dst_host = hosts.index(devices.host_of(src)), hosts.index(devices.host_of(dst))
    if src_host != dst_host:
        return (src, count + dst, 2 * count + len(hosts) + src_host, 2 * count + 2 * len(hosts) + dst_host)
    if devices.shared_bus:
        return (2 * count + src_host,)
    src_cpu, dst_cpu = devices.kind_of(src) == "CPU", devices.kind_of(dst) == "CPU"
    if src_cpu != dst_cpu:
        return (count + dst,) if src_cpu else (src,)
    return (src, count + dst)


def channel_count(devices: DeviceSet) -> int:
    """Number of channels :func:`route_channels` numbers."""
    count = len(devices.all_devices)
    hosts = {devices.host_of(d) for d in range(count)}
    return 2 * count + 3 * len(hosts)


def plan_transfers(graph: IndexedGraph, placed: Sequence[int], devices: DeviceSet) -> TransferPlan:
    """Build the :class:`TransferPlan` of ``graph`` with op ``i`` on device ``placed[i]``.

    Raises
    ------
    CostGraphError
        When an edge names an output slot its producer has no size for.
    """
    n = len(graph)
    output_sizes = graph.output_sizes
    slot_base = [0] * n
    buffer_size: list[int] = []
    buffer_device: list[int] = []
    for u in range(n):
        slot_base[u] = len(buffer_size)
        buffer_size.extend(output_sizes[u])
        buffer_device.extend([placed[u]] * len(output_sizes[u]))
    holders = [0] * len(buffer_size)
    pending = [0] * n
    local_next: list[list[int]] = [[] for _ in range(n)]
    sends: list[list[int]] = [[] for _ in range(n)]
    signals: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    releases: list[list[int]] = [[] for _ in range(n)]
    plan = TransferPlan(
        pending=pending,
        local_next=local_next,
        sends=sends,
        signals=signals,
        releases=releases,
        slot_base=slot_base,
        buffer_size=buffer_size,
        buffer_device=buffer_device,
        holders=holders,
        channel_routes=[[] for _ in range(channel_count(devices))],
    )
    route_of: dict[tuple[int, int], int] = {}
    every_device = range(len(devices.all_devices))
    links = [[devices.link(s, d) for d in every_device] for s in every_device]
    replicas = replicated_constants(graph, placed, devices)
    messages: dict[int, int] = {}  # device -> transfer of the empty tensor, of the producer u

    def signal(u: int, dv: int, v: int) -> None:
        """Op ``v`` on device ``dv`` waits for a control message from ``u``, on another device."""
        link = links[placed[u]][dv]
        assert link is not None  # placed[u] != dv
        if link.device_copies:  # an empty tensor that the devices send and receive like any
            t = messages.get(dv, -1)
            if t < 0:
                t = messages[dv] = _add_transfer(
                    plan, route_of, devices, link, u, None, placed[u], dv, 0, 1, ()
                )
            _deliver(plan, t, v)
        else:  # a control dependency, or tensors of 0 bytes: a message of latency b
            signals[u].append((v, link.b))
            pending[v] += 1

    for u in range(n):
        du = placed[u]
        sizes = output_sizes[u]
        base = slot_base[u]
        every_slot = range(base, base + len(sizes))
        tensors: dict[tuple[int, int], int] = {}  # (slot, device) -> transfer
        messages.clear()
        for v, nbytes, slots, count in zip(
            graph.succ[u], graph.succ_bytes[u], graph.succ_slots[u], graph.succ_transfers[u]
        ):
            dv = placed[v]
            if slots and max(slots) >= len(sizes):
                raise CostGraphError(
                    f"edge {graph.names[u]!r} -> {graph.names[v]!r} carries output slots {list(slots)} "
                    f"but {graph.names[u]!r} has {len(sizes)} output sizes"
                )
            if dv != du and u in replicas:
                continue  # the copy of the constant on dv serves v
            if v in replicas:  # each copy of v elsewhere waits for u as v does
                for copy_device, consumers in replicas[v].items():
                    if copy_device == dv:
                        continue
                    for w in consumers:
                        if copy_device == du:
                            local_next[u].append(w)
                            pending[w] += 1
                        else:
                            signal(u, copy_device, w)
                if dv not in replicas[v]:
                    continue  # the original constant has no consumer left: TensorFlow removes it
            if dv == du:
                local_next[u].append(v)
                pending[v] += 1
                held = [base + s for s in slots] if slots else every_slot if nbytes else ()
                for buffer in held:
                    holders[buffer] += 1
                    releases[v].append(buffer)
                continue
            link = links[du][dv]
            assert link is not None  # du != dv
            if not slots and nbytes:
                t = _add_transfer(plan, route_of, devices, link, u, None, du, dv, nbytes, count, every_slot)
                _deliver(plan, t, v)
                continue
            sent = False
            for s in slots:
                size = sizes[s]
                if size:
                    sent = True
                    t = tensors.get((s, dv), -1)
                    if t < 0:
                        t = tensors[s, dv] = _add_transfer(
                            plan, route_of, devices, link, u, s, du, dv, size, 1, (base + s,)
                        )
                    _deliver(plan, t, v)
            if not sent:
                signal(u, dv, v)
    _share_aliased_buffers(graph, placed, plan)
    return plan


def replicated_constants(
    graph: IndexedGraph, placed: Sequence[int], devices: DeviceSet
) -> dict[int, dict[int, list[int]]]:
    """The constants TensorFlow's ``ReplicateConstantsPass`` copies to the devices consuming them:
    constant -> device of a copy -> the constant's consumers there.

    A small constant (:attr:`~tfplace.core.indexed.IndexedGraph.small_constant`) on a CPU whose
    consumers are on several devices gets a copy on each (:data:`~tfplace.core.indexed.REPLICATED_CONSTANT_ELEMENTS`);
    each copy keeps the original's control inputs, so every one of them sends a control message
    to every device of a copy (Inception V3's optimizer constants wait on its 188 batch-norm
    updates). A constant with a consumer on a GPU is left out: TensorFlow puts that consumer's
    copy on its host's CPU 0, whose transfer to the GPU this does not model.
    """
    replicas: dict[int, dict[int, list[int]]] = {}
    for c in np.flatnonzero(graph.small_constant).tolist():
        if devices.kind_of(placed[c]) != "CPU":
            continue
        by_device: dict[int, list[int]] = {}
        for v in graph.succ[c]:
            by_device.setdefault(placed[v], []).append(v)
        if len(by_device) > 1 and all(devices.kind_of(d) == "CPU" for d in by_device):
            replicas[c] = by_device
    return replicas


def _share_aliased_buffers(graph: IndexedGraph, placed: Sequence[int], plan: TransferPlan) -> None:
    """Make each aliased output slot a buffer of 0 bytes holding the input buffer it is.

    The input's buffer is the producer's slot when both ops share a device, else the copy received
    on the consumer's device; when there is none (a tensor of 0 bytes is not sent), the slot just
    allocates nothing.
    """
    aliased = [v for v, entries in enumerate(graph.aliases) if entries]
    if not aliased:
        return
    received = {(u, s, d): t for t, (u, s, d) in enumerate(zip(plan.producer, plan.slot, plan.dst))}
    for v in aliased:
        sizes = graph.output_sizes[v]
        for slot, u, source in graph.aliases[v]:
            if slot >= len(sizes):
                continue
            buffer = plan.slot_base[v] + slot
            plan.buffer_size[buffer] = 0
            if placed[u] == placed[v]:
                parent = plan.slot_base[u] + source if source < len(graph.output_sizes[u]) else -1
            else:
                t = received.get((u, source, placed[v]), -1)
                parent = plan.buffer[t] if t >= 0 else -1
            if parent >= 0:
                plan.parent[buffer] = parent
                plan.holders[parent] += 1


def _add_transfer(
    plan: TransferPlan,
    route_of: dict[tuple[int, int], int],
    devices: DeviceSet,
    link: TransferModel,
    u: int,
    slot: int | None,
    src: int,
    dst: int,
    nbytes: int,
    count: int,
    holds: Sequence[int],
) -> int:
    """Register one tensor of op ``u`` sent from device ``src`` to ``dst``; return its transfer id."""
    route = route_of.get((src, dst), -1)
    if route < 0:
        route = route_of[src, dst] = len(plan.routes)
        plan.routes.append((src, dst))
        channels = route_channels(devices, src, dst)
        plan.route_channels.append(channels)
        for channel in channels:
            plan.channel_routes[channel].append(route)
    t = len(plan.producer)
    plan.producer.append(u)
    plan.slot.append(slot)
    plan.src.append(src)
    plan.dst.append(dst)
    plan.nbytes.append(nbytes)
    if link.device_copies:  # the devices do the work; the rest of the time holds neither
        plan.duration.append(link.copy_k * nbytes + link.copy_b * count)
    else:
        plan.duration.append(link.k * nbytes + (link.b - link.latency) * count)
    plan.delay.append(link.delay(nbytes))
    plan.on_devices.append(link.device_copies)
    plan.route.append(route)
    plan.holds.append(holds)
    for buffer in holds:
        plan.holders[buffer] += 1
    plan.consumers.append([])
    received = len(plan.buffer_size)
    plan.buffer.append(received)
    plan.buffer_device.append(dst)
    plan.holders.append(0)
    if slot is not None and devices.shared_host_memory and devices.host_of(src) == devices.host_of(dst):
        plan.buffer_size.append(0)  # handed over: the sender's buffer, held until it is released
        plan.parent[received] = holds[0]
        plan.holders[holds[0]] += 1
    else:
        plan.buffer_size.append(nbytes)
    plan.sends[u].append(t)
    return t


def _deliver(plan: TransferPlan, t: int, v: int) -> None:
    """Op ``v`` waits for transfer ``t`` and holds the received copy until it ends."""
    plan.consumers[t].append(v)
    plan.pending[v] += 1
    plan.releases[v].append(plan.buffer[t])
    plan.holders[plan.buffer[t]] += 1
