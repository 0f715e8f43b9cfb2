"""The liveness memory model of the placers that fill devices in an order (m-TOPO, DFS-TOPO,
Order-Place, Celeritas): the peak of the tensors live on a device along the placer's own schedule.

The placer runs ops one after another in its order (a topological order: Kahn's, DFS-TOPO's or
CPD-TOPO's clusters); each op runs on its group's device. On that schedule a device holds

* the persistent memory of every group placed on it, for the whole step (from time 0, so placing a
  group raises the device's past peak too);
* an op's outputs from its start until every consumer has run (a consumer on another device
  received its copy by then);
* a tensor received from another device until every consumer of its producer has run;
* an op's temporary memory while it runs.

While placing, a placer does not know where later consumers go, so a tensor is counted on their
device from the moment the first of them runs there. Once every op is placed, the estimate is
replayed in the order the executor would run the ops (:mod:`tfplace.placer.executor_order`: the
devices side by side, each running its ops as they become ready), with each tensor received from
the start of its transfer, queued behind the others on its link, as the executor (and the
simulator) does: a device that runs the late consumers of early tensors, the backward pass of
activations made elsewhere, holds them while it waits, a device that starts ready ops before the
placer's order reaches them holds their outputs, and a device fed by a link with thousands of
transfers queued receives them only as the link gets to them. The estimate of a device is its
peak (:attr:`LiveMemory.peak`); it is the estimate of every placer's final placement, m-ETF's and
m-SCT's too (their list scheduler decides with Baechi's dynamic model, :mod:`tfplace.placer.etf`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from heapq import heappop, heappush
from typing import cast

import numpy as np

from tfplace.core.indexed import IndexedGraph

__all__ = ["LiveMemory", "slot_size"]

_Held = dict[int, int]
"""Device -> bytes of one op's outputs (or a received copy of them) held there."""


class LiveMemory:
    """Live bytes and peak of each device as ops run in the placer's order.

    ``device_of(op)`` gives the device an op's group went to (or a negative number when unplaced);
    :meth:`peak_after` is the check of a placer's memory test, :meth:`run` the commit.
    """

    def __init__(self, graph: IndexedGraph, devices: int, device_of: Callable[[int], int]):
        self.graph = graph
        self.device_of = device_of
        self.order: list[int] = []
        self.live = [0] * devices
        self.peaks = [0] * devices
        self.outputs: list[int] = graph.outputs.tolist()
        self.temporary: list[int] = graph.temporary.tolist()
        self.growth = graph.outputs + graph.inbound_bytes
        self.pending = list(map(len, graph.succ))
        self.held: list[_Held | None] = [None] * len(graph)
        self.ran = [False] * len(graph)
        #: ``(input op, bytes)`` of the input buffers each op's outputs took over (aliased) on its
        #: device, from inputs with one output (an op's outputs are one copy per device here; the
        #: simulator holds each output slot of a multi-output op as long as that slot's own holders)
        self.taken: dict[int, list[tuple[int, int]]] = {}

    @property
    def peak(self) -> np.ndarray:
        """Peak bytes of each device so far."""
        return np.array(self.peaks, dtype=np.int64)

    @property
    def complete(self) -> bool:
        """Whether every op has run."""
        return len(self.order) == len(self.ran)

    def add_persistent(self, device: int, nbytes: int) -> None:
        """Persistent memory placed on ``device``: held from the step's start to its end."""
        self.live[device] += nbytes
        self.peaks[device] += nbytes

    def peak_within(self, ops: Sequence[int], device: int, limit: float, persistent: int = 0) -> bool:
        """Whether ``peak_after(ops, device, device, persistent)`` is at most ``limit``.

        Most trials are far below the limit; an upper bound decides those in a few vector
        operations: every op of ``ops`` allocates its outputs and receives every input, nothing is
        freed, and the largest temporary memory among them comes on top. Only a trial whose bound
        exceeds ``limit`` replays ``ops`` one by one (:meth:`peak_after`)."""
        index = np.asarray(ops, dtype=np.int64)
        grown = int(self.growth[index].sum()) + int(self.graph.temporary[index].max()) if len(index) else 0
        if max(self.peaks[device], self.live[device] + grown) + persistent <= limit:
            return True
        return bool(self.peak_after(ops, device, device, persistent) <= limit)

    def peak_after(self, ops: Sequence[int], device: int, default: int, persistent: int = 0) -> int:
        """The peak of ``device`` if ``persistent`` bytes were placed on it and ``ops`` ran next
        (each on its group's device, ``default`` for an unplaced one); nothing changes."""
        graph = self.graph
        pred, pred_position, succ, succ_bytes = graph.pred, graph.pred_position, graph.succ, graph.succ_bytes
        outputs, temporary, device_of, before = self.outputs, self.temporary, self.device_of, self.held
        committed_pending = self.pending
        live = self.live[device] + persistent
        peak = max(self.peaks[device] + persistent, live)
        pending: dict[int, int] = {}
        held: dict[int, int] = {}  # bytes of an op's outputs on ``device``, as the trial changes them
        for v in ops:
            d = device_of(v)
            if d != device and (d >= 0 or default != device):
                continue
            for p, position in zip(pred[v], pred_position[v]):
                if p not in held:
                    entry = before[p]
                    if entry is None or device not in entry:
                        nbytes = held[p] = succ_bytes[p][position]
                        live += nbytes
            taken = 0
            for _, u, slot in graph.aliases[v]:
                size = slot_size(graph.output_sizes[u], slot)
                current = self._bytes_on(u, device, held)
                if current >= size:
                    held[u] = current - size
                    taken += size
            held[v] = outputs[v] + taken
            live += outputs[v]
            if live + temporary[v] > peak:
                peak = live + temporary[v]
            for p in pred[v]:
                left = pending[p] - 1 if p in pending else committed_pending[p] - 1
                pending[p] = left
                if not left:
                    if p in held:
                        live -= held[p]
                    else:
                        entry = before[p]
                        if entry is not None:
                            live -= entry.get(device, 0)
                    held[p] = 0
            if not succ[v]:
                live -= held[v]
                held[v] = 0
        return peak

    def _bytes_on(self, op: int, device: int, trial: dict[int, int]) -> int:
        """Bytes of ``op``'s outputs on ``device`` in a :meth:`peak_after` trial."""
        if op in trial:
            return trial[op]
        entry = self.held[op]
        return entry.get(device, 0) if entry is not None else 0

    def run(self, ops: Iterable[int], default: int) -> None:
        """Run ``ops`` in order, each on its group's device (``default`` when unplaced); a tensor is
        freed everywhere once every consumer of it has run."""
        succ, pred, pending, all_held, ran = (
            self.graph.succ,
            self.graph.pred,
            self.pending,
            self.held,
            self.ran,
        )
        live, device_of, order, start = self.live, self.device_of, self.order, self._start
        for v in ops:
            if ran[v]:
                continue
            d = device_of(v)
            start(v, d if d >= 0 else default)
            ran[v] = True
            order.append(v)
            for p in pred[v]:
                left = pending[p] = pending[p] - 1
                if not left:
                    _free(live, all_held, p)
            if not succ[v]:
                _free(live, all_held, v)

    def replay(
        self,
        order: Sequence[int],
        start: Sequence[float],
        transfers: Sequence[tuple[float, float, int, int, int]],
    ) -> None:
        """Run every op of a final placement as the executor would (:mod:`tfplace.placer.executor_order`):
        ``order`` by ``start`` time; ``transfers`` lists ``(start, end, producer, receiver, bytes)`` of each tensor sent.
        A received copy is held from its transfer's start until its last consumer on the receiver
        has ended; the producer's own copy until its last consumer on its device has ended and its
        last transfer has ended (the simulator's rules). Frees at a moment come before allocations."""
        device_of, compute, pred, live, taken = (
            self.device_of,
            self.graph.compute.tolist(),
            self.graph.pred,
            self.live,
            self.taken,
        )
        held = cast(list[_Held], self.held)  # a replay frees copies one device at a time: never None
        holders = self._holders(transfers)
        events = sorted(
            [(begin, 1, p, receiver, nbytes) for begin, _, p, receiver, nbytes in transfers]
            + [(end, 0, p, device_of(p), 0) for _, end, p, _, _ in transfers]
        )
        events.append((math.inf, 0, -1, -1, 0))
        running: list[tuple[float, int, int]] = [(math.inf, -1, -1)]  # (end, op, device) of running ops
        done = 0
        for v in order:
            now = start[v]
            # ends and transfer ends up to now, transfer starts before now (one starting now may
            # be the output of the op starting now)
            while running[0][0] <= now or events[done][:2] <= (now, 0):
                if running[0][0] <= events[done][0]:
                    _, ended, d = heappop(running)
                    for p in pred[ended]:  # the op ended: its inputs on d lose a holder
                        counts = holders[p]
                        left = counts[d] = counts[d] - 1
                        if not left:
                            if p in taken:
                                self._release(p, d, holders)
                            else:
                                live[d] -= held[p].pop(d, 0)
                    if not holders[ended].get(d):  # outputs nothing on d uses
                        if ended in taken:
                            self._release(ended, d, holders)
                        else:
                            live[d] -= held[ended].pop(d, 0)
                    continue
                _, receives, p, device, nbytes = events[done]
                done += 1
                if receives:
                    self._receive(p, device, nbytes)
                else:  # a transfer ended: the producer's copy loses a holder
                    counts = holders[p]
                    left = counts[device] = counts[device] - 1
                    if not left:
                        if p in taken:
                            self._release(p, device, holders)
                        else:
                            live[device] -= held[p].pop(device, 0)
            d = device_of(v)
            self._start(v, d)
            self.ran[v] = True
            self.order.append(v)
            heappush(running, (now + compute[v], v, d))

    def _release(self, op: int, device: int, holders: list[dict[int, int]]) -> None:
        """``op``'s copy on ``device``, whose outputs took over input buffers, has no holder left:
        free it, except those input buffers while their producer's copy there still has holders
        (the simulator frees an aliased buffer when the alias and every holder of the buffer have
        released it): those go back to that copy."""
        nbytes = cast(_Held, self.held[op]).pop(device, 0)
        for source, size in self.taken[op] if self.device_of(op) == device else ():
            owner = self.held[source]
            if owner is not None and device in owner and holders[source].get(device):
                back = min(size, nbytes)  # a later alias may have taken part of them on in turn
                owner[device] += back
                nbytes -= back
        self.live[device] -= nbytes

    def _holders(self, transfers: Sequence[tuple[float, float, int, int, int]]) -> list[dict[int, int]]:
        """Releases each copy of each op's outputs waits for: per device, the consumers there, and
        on the producer's device its transfers too."""
        device = list(map(self.device_of, range(len(self.graph))))
        holders: list[dict[int, int]] = []
        for consumers in self.graph.succ:
            counts: dict[int, int] = {}
            for w in consumers:
                d = device[w]
                counts[d] = counts.get(d, 0) + 1
            holders.append(counts)
        for _, _, p, _, _ in transfers:
            holders[p][device[p]] = holders[p].get(device[p], 0) + 1
        return holders

    def _start(self, v: int, d: int) -> None:
        """Op ``v`` starts on device ``d``: its inputs not yet there arrive, its aliased outputs
        take over their inputs' bytes, its outputs and temporary memory are allocated."""
        graph, all_held, live = self.graph, self.held, self.live
        succ_bytes = graph.succ_bytes
        added = self.outputs[v]
        for p, position in zip(graph.pred[v], graph.pred_position[v]):
            producer = all_held[p]
            if producer is not None and d not in producer:
                nbytes = producer[d] = succ_bytes[p][position]
                added += nbytes
        taken = 0
        for _, u, slot in graph.aliases[v]:
            size = slot_size(graph.output_sizes[u], slot)
            source = all_held[u]
            if source is not None and source.get(d, 0) >= size:
                source[d] -= size
                taken += size
                if len(graph.output_sizes[u]) == 1:  # then u's copy is the buffer v aliases
                    self.taken.setdefault(v, []).append((u, size))
        all_held[v] = {d: self.outputs[v] + taken}
        now = live[d] = live[d] + added
        if now + self.temporary[v] > self.peaks[d]:
            self.peaks[d] = now + self.temporary[v]

    def _receive(self, producer: int, device: int, nbytes: int) -> None:
        """``nbytes`` of ``producer``'s outputs (one tensor) arrive on ``device`` (from now on held)."""
        held = self.held[producer]
        if held is None:
            return
        self.live[device] += nbytes
        held[device] = held.get(device, 0) + nbytes
        if self.live[device] > self.peaks[device]:
            self.peaks[device] = self.live[device]


def _free(live: list[int], all_held: list[_Held | None], op: int) -> None:
    """Every copy of ``op``'s outputs released."""
    held = all_held[op]
    if held is None:
        return
    for d, nbytes in held.items():
        live[d] -= nbytes
    all_held[op] = None


def slot_size(sizes: tuple[int, ...], slot: int) -> int:
    """Bytes of output ``slot`` (0 for a slot the op does not report)."""
    return sizes[slot] if slot < len(sizes) else 0
