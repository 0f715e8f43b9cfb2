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
replayed in the same order with each tensor sent as soon as its producer finished (``eager_sends``),
as the executor (and the simulator) does: a device that runs the late consumers of early tensors,
the backward pass of activations made elsewhere, holds them while it waits. The estimate of a
device is its peak (:attr:`LiveMemory.peak`). m-ETF and m-SCT keep Baechi's
dynamic model in their own list scheduler (:mod:`tfplace.placer.etf`), which follows the same
rules with start and finish times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tfplace.indexed import IndexedGraph

__all__ = ["LiveMemory"]

_Held = dict[int, int]
"""Device -> bytes of one op's outputs (or a received copy of them) held there."""


class LiveMemory:
    """Live bytes and peak of each device as ops run in the placer's order.

    ``device_of(op)`` gives the device an op's group went to (or a negative number when unplaced);
    :meth:`peak_after` is the check of a placer's memory test, :meth:`run` the commit.
    """

    def __init__(
        self, graph: IndexedGraph, devices: int, device_of: Callable[[int], int], *, eager_sends: bool = False
    ):
        self.graph = graph
        self.device_of = device_of
        self.eager_sends = eager_sends
        self.order: list[int] = []
        self.live = np.zeros(devices, dtype=np.int64)
        self.peak = np.zeros(devices, dtype=np.int64)
        self.pending = np.fromiter(map(len, graph.succ), dtype=np.int64, count=len(graph))
        self.held: list[_Held | None] = [None] * len(graph)
        self.ran = np.zeros(len(graph), dtype=bool)

    def add_persistent(self, device: int, nbytes: int) -> None:
        """Persistent memory placed on ``device``: held from the step's start to its end."""
        self.live[device] += nbytes
        self.peak[device] += nbytes

    def peak_after(self, ops: Sequence[int], device: int, default: int, persistent: int = 0) -> int:
        """The peak of ``device`` if ``persistent`` bytes were placed on it and ``ops`` ran next
        (each on its group's device, ``default`` for an unplaced one); nothing changes."""
        graph = self.graph
        live = int(self.live[device]) + persistent
        peak = max(int(self.peak[device]) + persistent, live)
        pending: dict[int, int] = {}
        held: dict[int, int] = {}  # bytes of an op's outputs on ``device``, as the trial changes them
        for v in ops:
            if self._device(v, default) != device:
                continue
            received = 0
            for p, position in zip(graph.pred[v], graph.pred_position[v]):
                if p not in held and not self._holds(p, device):
                    held[p] = int(graph.succ_bytes[p][position])
                    received += held[p]
            taken = 0
            for _, u, slot in graph.aliases[v]:
                size = _slot_size(graph.output_sizes[u], slot)
                current = held[u] if u in held else self._held_bytes(u, device)
                if current >= size:
                    held[u] = current - size
                    taken += size
            held[v] = int(graph.outputs[v]) + taken
            live += int(graph.outputs[v]) + received
            peak = max(peak, live + int(graph.temporary[v]))
            for p in graph.pred[v]:
                left = pending.get(p, int(self.pending[p])) - 1
                pending[p] = left
                if not left:
                    live -= held[p] if p in held else self._held_bytes(p, device)
                    held[p] = 0
            if not graph.succ[v]:
                live -= held[v]
                held[v] = 0
        return peak

    def run(self, ops: Iterable[int], default: int) -> None:
        """Run ``ops`` in order, each on its group's device (``default`` when unplaced)."""
        graph = self.graph
        for v in ops:
            if self.ran[v]:
                continue
            d = self._device(v, default)
            for p, position in zip(graph.pred[v], graph.pred_position[v]):
                producer = self.held[p]
                if producer is not None and d not in producer:
                    producer[d] = int(graph.succ_bytes[p][position])
                    self.live[d] += producer[d]
            taken = 0
            for _, u, slot in graph.aliases[v]:
                size = _slot_size(graph.output_sizes[u], slot)
                source = self.held[u]
                if source is not None and source.get(d, 0) >= size:
                    source[d] -= size
                    taken += size
            held = self.held[v] = {d: int(graph.outputs[v]) + taken}
            self.live[d] += graph.outputs[v]
            self.peak[d] = max(self.peak[d], self.live[d] + graph.temporary[v])
            if self.eager_sends:
                self._send(v, d, held)
            self.ran[v] = True
            self.order.append(v)
            for p in graph.pred[v]:
                self.pending[p] -= 1
                if not self.pending[p]:
                    self._free(p)
            if not graph.succ[v]:
                self._free(v)

    def _send(self, v: int, d: int, held: _Held) -> None:
        """Copies of ``v``'s outputs sent right away to its consumers' other devices."""
        graph = self.graph
        for w, nbytes in zip(graph.succ[v], graph.succ_bytes[v]):
            other = self.device_of(w)
            if other != d and nbytes and held.get(other, 0) < nbytes:
                self.live[other] += nbytes - held.get(other, 0)
                held[other] = nbytes
                self.peak[other] = max(self.peak[other], self.live[other])

    def _device(self, v: int, default: int) -> int:
        d = self.device_of(v)
        return default if d < 0 else d

    def _holds(self, op: int, device: int) -> bool:
        held = self.held[op]
        return held is not None and device in held

    def _held_bytes(self, op: int, device: int) -> int:
        held = self.held[op]
        return held.get(device, 0) if held is not None else 0

    def _free(self, op: int) -> None:
        held = self.held[op]
        if held is None:
            return
        for d, nbytes in held.items():
            self.live[d] -= nbytes
        self.held[op] = None


def _slot_size(sizes: tuple[int, ...], slot: int) -> int:
    return sizes[slot] if slot < len(sizes) else 0
