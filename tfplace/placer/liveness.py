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
devices side by side, each running its ops as they become ready), with each tensor sent as soon as
its producer finished (``eager_sends``), as the executor (and the simulator) does: a device that
runs the late consumers of early tensors, the backward pass of activations made elsewhere, holds
them while it waits, and a device that starts ready ops before the placer's order reaches them
holds their outputs. The estimate of a
device is its peak (:attr:`LiveMemory.peak`). m-ETF and m-SCT keep Baechi's
dynamic model in their own list scheduler (:mod:`tfplace.placer.etf`), which follows the same
rules with start and finish times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

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

    def __init__(
        self, graph: IndexedGraph, devices: int, device_of: Callable[[int], int], *, eager_sends: bool = False
    ):
        self.graph = graph
        self.device_of = device_of
        self.eager_sends = eager_sends
        self.order: list[int] = []
        self.live = [0] * devices
        self.peaks = [0] * devices
        self.outputs: list[int] = graph.outputs.tolist()
        self.temporary: list[int] = graph.temporary.tolist()
        self.pending = list(map(len, graph.succ))
        self.held: list[_Held | None] = [None] * len(graph)
        self.ran = [False] * len(graph)

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
        """Run ``ops`` in order, each on its group's device (``default`` when unplaced)."""
        graph = self.graph
        pred, pred_position, succ, succ_bytes = graph.pred, graph.pred_position, graph.succ, graph.succ_bytes
        aliases, output_sizes = graph.aliases, graph.output_sizes
        live, peaks, pending, all_held, ran = self.live, self.peaks, self.pending, self.held, self.ran
        outputs, temporary, device_of, order = self.outputs, self.temporary, self.device_of, self.order
        eager_sends = self.eager_sends
        for v in ops:
            if ran[v]:
                continue
            d = device_of(v)
            if d < 0:
                d = default
            added = outputs[v]
            for p, position in zip(pred[v], pred_position[v]):
                producer = all_held[p]
                if producer is not None and d not in producer:
                    nbytes = producer[d] = succ_bytes[p][position]
                    added += nbytes
            taken = 0
            for _, u, slot in aliases[v]:
                size = slot_size(output_sizes[u], slot)
                source = all_held[u]
                if source is not None and source.get(d, 0) >= size:
                    source[d] -= size
                    taken += size
            held = all_held[v] = {d: outputs[v] + taken}
            now = live[d] = live[d] + added
            if now + temporary[v] > peaks[d]:
                peaks[d] = now + temporary[v]
            if eager_sends:
                self._send(v, d, held)
            ran[v] = True
            order.append(v)
            for p in pred[v]:
                left = pending[p] = pending[p] - 1
                if not left:
                    producer = all_held[p]
                    if producer is not None:
                        for other, nbytes in producer.items():
                            live[other] -= nbytes
                        all_held[p] = None
            if not succ[v]:
                _free(live, all_held, v)

    def _send(self, v: int, d: int, held: _Held) -> None:
        """Copies of ``v``'s outputs sent right away to its consumers' other devices."""
        graph, live, peaks, device_of = self.graph, self.live, self.peaks, self.device_of
        for w, nbytes in zip(graph.succ[v], graph.succ_bytes[v]):
            if not nbytes:
                continue
            other = device_of(w)
            if other != d and held.get(other, 0) < nbytes:
                live[other] += nbytes - held.get(other, 0)
                held[other] = nbytes
                if live[other] > peaks[other]:
                    peaks[other] = live[other]


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
