"""Device memory and placement constraints that every placer shares.

Two memory models (``memory_model``):

* ``"static"`` (Celeritas Eq. 6 and Algorithm 2, the paper's): a device holds the persistent memory
  and every output of the ops placed on it, plus the largest temporary memory of any one of them
  (``resident + peak temporary``).
* ``"liveness"``: the peak of the tensors live on the device along the placer's own schedule, the
  ops running in the order the placer passes them (:mod:`tfplace.placer.liveness`). A placer that
  uses it passes the ops it runs to :meth:`MemoryLedger.fits` and :meth:`MemoryLedger.commit`
  (or :meth:`MemoryLedger.run` for ops whose groups are placed already).

Co-location follows Celeritas section 6.1 (and Baechi): the first op of a group that is placed
decides the device of the whole group, and the whole group's memory is counted there at once.
Ops whose group cannot run on any target device (no kernel for its type) go to a fallback CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tfplace.core.costgraph import CostGraphError
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.placer.executor_order import ExecutorSchedule, executor_order
from tfplace.placer.liveness import LiveMemory

__all__ = [
    "LIVENESS_MARGIN",
    "MEMORY_MODELS",
    "UNPLACED",
    "MemoryLedger",
    "Overcommit",
    "Replay",
    "check_memory_model",
]

#: The memory models a ledger counts with; the placers' default is the first.
MEMORY_MODELS = ("liveness", "static")
#: Share of a device's capacity the liveness model leaves free: the simulator runs a device's ops
#: in first-ready order, not quite the placer's, and its peak differs by a few percent (the same
#: margin as ``auto``'s).
LIVENESS_MARGIN = 0.05

UNPLACED = -1


@dataclass(frozen=True)
class Overcommit:
    """A device holds more than its memory after a best-effort placement."""

    device: str
    used: int
    capacity: int

    @property
    def shortfall(self) -> int:
        return self.used - self.capacity

    def __str__(self) -> str:
        return (
            f"{self.device} is overcommitted by {self.shortfall:,} bytes "
            f"({self.used:,} placed on {self.capacity:,})"
        )


@dataclass(frozen=True)
class Replay:
    """A finished placement replayed in the executor's order (:mod:`tfplace.placer.executor_order`):
    each device's ``peak`` of live bytes and the ``makespan``, the last op's finish (the list
    schedule the simulator runs, so the placer's own estimate of the step)."""

    peak: np.ndarray
    makespan: float


class MemoryLedger:
    """Tracks which device each co-location group went to and the memory each device holds.

    Parameters
    ----------
    graph : IndexedGraph
        The ops being placed (op-level, even when a placer places clusters of them).
    devices : DeviceSet
        Targets, then fallback CPUs (indices into ``devices.all_devices``).
    capacity : sequence of int, optional
        Bytes a placer may fill on each target; defaults to each device's memory. Placers that
        spread ops on purpose (m-TOPO's uniform cap) pass a lower cap.
    memory_model : {"static", "liveness"}
        How :meth:`fits` and :meth:`used` count (module docstring).
    replays : dict, optional
        :class:`Replay` of finished placements in the executor's order, keyed by the placement,
        shared by ledgers of the same graph and devices (a placer that tries several placements
        replays each distinct one once).
    """

    def __init__(
        self,
        graph: IndexedGraph,
        devices: DeviceSet,
        capacity: Sequence[int] | None = None,
        memory_model: str = "static",
        replays: dict[bytes, Replay] | None = None,
    ):
        check_memory_model(memory_model)
        self.graph = graph
        self.replays: dict[bytes, Replay] = {} if replays is None else replays
        self.memory_model = memory_model
        self.devices = devices
        all_devices = devices.all_devices
        self.num_targets = len(devices)
        self.capacity = np.array(
            [d.memory for d in all_devices]
            if capacity is None
            else list(capacity) + [d.memory for d in devices.fallback_cpus],
            dtype=np.int64,
        )
        self.resident = np.zeros(len(all_devices), dtype=np.int64)
        self.peak_temporary = np.zeros(len(all_devices), dtype=np.int64)
        self.group_device = np.full(len(graph.group_members), UNPLACED, dtype=np.int64)
        self._groups: list[int] = graph.group.tolist()
        self._group_device: list[int] = [UNPLACED] * len(graph.group_members)  # group_device, as a list
        groups = len(graph.group_members)
        self.group_resident = np.zeros(groups, dtype=np.int64)
        np.add.at(self.group_resident, graph.group, graph.resident)
        self.group_temporary = np.zeros(groups, dtype=np.int64)
        np.maximum.at(self.group_temporary, graph.group, graph.temporary)
        self.group_persistent = np.zeros(groups, dtype=np.int64)
        np.add.at(self.group_persistent, graph.group, graph.persistent)
        self._group_persistent: list[int] = self.group_persistent.tolist()  # for per-trial sums
        self.live = self._live_memory()
        self._replayed: Replay | None = None
        everywhere = tuple(range(self.num_targets))
        self.group_targets: list[tuple[int, ...]] = [everywhere] * groups
        constrained = {int(graph.group[op]) for op, kinds in enumerate(graph.kinds) if kinds is not None}
        for g in sorted(constrained):
            self.group_targets[g] = self._allowed_targets(graph.group_members[g])

    def _allowed_targets(self, members: list[int]) -> tuple[int, ...]:
        """Targets whose device kind has a kernel for every op of a group (``()``: fallback CPU)."""
        allowed: set[str] | None = None
        for op in members:
            kinds = self.graph.kinds[op]
            if kinds is not None:
                allowed = set(kinds) if allowed is None else allowed & set(kinds)
        if allowed is not None and not allowed:
            names = ", ".join(self.graph.names[op] for op in members[:6])
            raise CostGraphError(
                f"co-location group of {names} has no device kind that can run all of its ops"
            )
        return tuple(
            d for d in range(self.num_targets) if allowed is None or self.devices.kind_of(d) in allowed
        )

    def blank(self) -> MemoryLedger:
        """An empty ledger on the same graph, devices and capacities; the groups' allowed targets
        are shared, not computed again (placers that try many placements start each from one)."""
        ledger = copy.copy(self)
        ledger.resident = np.zeros_like(self.resident)
        ledger.peak_temporary = np.zeros_like(self.peak_temporary)
        ledger.group_device = np.full_like(self.group_device, UNPLACED)
        ledger._group_device = [UNPLACED] * len(self._group_device)
        ledger.live = ledger._live_memory()
        ledger._replayed = None
        return ledger

    def _live_peaks(self) -> np.ndarray:
        live = self.live
        assert live is not None
        if not live.complete:
            return live.peak
        return self.replayed().peak

    def replayed(self) -> Replay:
        """The executor-order replay of the finished placement (liveness model only)."""
        assert self.live is not None and self.live.complete, "only a finished placement is replayed"
        if self._replayed is None:
            self._replayed = self.replay_groups(self.group_device)
        return self._replayed

    def replay_groups(self, group_device: np.ndarray, schedule: ExecutorSchedule | None = None) -> Replay:
        """The executor-order replay with every co-location group on ``group_device`` (each one
        placed), from the shared cache ``replays`` when that placement was replayed before;
        ``schedule`` is its :func:`~tfplace.placer.executor_order.executor_order` if known."""
        persistent = np.bincount(group_device, weights=self.group_persistent, minlength=len(self.capacity))
        op_devices = group_device[self.graph.group]
        key = op_devices.tobytes() + persistent.tobytes()
        if key not in self.replays:
            device_of = op_devices.tolist()
            replay = LiveMemory(self.graph, len(self.capacity), device_of.__getitem__)
            for d in np.flatnonzero(persistent).tolist():
                replay.add_persistent(d, int(persistent[d]))
            schedule = schedule or executor_order(self.graph, device_of, self.devices)
            replay.replay(schedule.order, schedule.start, schedule.transfers)
            finish = np.asarray(schedule.start) + self.graph.compute
            self.replays[key] = Replay(replay.peak, float(finish.max(initial=0.0)))
        return self.replays[key]

    def _live_memory(self) -> LiveMemory | None:
        if self.memory_model != "liveness":
            return None
        return LiveMemory(self.graph, len(self.capacity), self.device_of)

    # -- queries -----------------------------------------------------------------------------

    def device_of(self, op: int) -> int:
        """Device of an op's group, or :data:`UNPLACED`."""
        return self._group_device[self._groups[op]]

    def new_groups(self, ops: Sequence[int]) -> list[int]:
        """Groups touched by ``ops`` that are not placed yet, each once, in the order of ``ops``."""
        groups = self.graph.group[np.asarray(ops, dtype=np.int64)]
        return list(dict.fromkeys(groups[self.group_device[groups] == UNPLACED].tolist()))

    def placed_devices(self, ops: Sequence[int]) -> list[int]:
        """Devices the already placed groups of ``ops`` are on, sorted."""
        devices = self.group_device[self.graph.group[np.asarray(ops, dtype=np.int64)]]
        return sorted(set(devices[devices != UNPLACED].tolist()))

    def candidates(self, groups: Sequence[int]) -> list[int]:
        """Targets that may take unplaced ``groups``: those every group with a kernel choice
        allows. When none constrain, or their constraints conflict, every target: :meth:`commit`
        then sends each group that cannot run there to a device that can."""
        allowed: set[int] | None = None
        for g in groups:
            targets = self.group_targets[g]
            if targets:
                allowed = set(targets) if allowed is None else allowed & set(targets)
        if not allowed:
            return list(range(self.num_targets))
        return sorted(allowed)

    def demand(self, groups: Sequence[int], device: int | None = None) -> tuple[int, int]:
        """Resident bytes and largest temporary bytes that ``groups`` add (to ``device``: only
        the groups that can run there)."""
        if device is not None:
            groups = [g for g in groups if device in self.group_targets[g]]
        if not groups:
            return 0, 0
        index = np.asarray(groups)
        return int(self.group_resident[index].sum()), int(self.group_temporary[index].max())

    def used(self, device: int) -> int:
        """Bytes a device holds: resident memory plus the largest temporary memory (static), or
        the peak of its live memory so far (liveness; once every op ran, replayed in the executor's
        order with each tensor received when its transfer starts, :mod:`tfplace.placer.liveness`)."""
        if self.live is not None:
            return int(self._live_peaks()[device])
        return int(self.resident[device] + self.peak_temporary[device])

    def fits(self, groups: Sequence[int], device: int, ops: Sequence[int] = ()) -> bool:
        """Whether ``groups`` fit in the capacity left on ``device``; under liveness, whether the
        device's peak stays within it when the groups' persistent memory is placed there and
        ``ops`` run next."""
        if self.live is not None:
            targets, group_persistent = self.group_targets, self._group_persistent
            persistent = sum(group_persistent[g] for g in groups if device in targets[g])
            return self.live.peak_within(
                ops, device, (1 - LIVENESS_MARGIN) * self.capacity[device], persistent
            )
        resident, temporary = self.demand(groups, device)
        after = self.resident[device] + resident + max(int(self.peak_temporary[device]), temporary)
        return bool(after <= self.capacity[device])

    def least_used(self, devices: Iterable[int]) -> int:
        """Best effort (Algorithm 2, line 20): the device with the lowest memory use."""
        return min(devices, key=lambda d: (self.used(d) / max(int(self.capacity[d]), 1), d))

    # -- updates -----------------------------------------------------------------------------

    def commit(self, groups: Iterable[int], device: int, ops: Sequence[int] = ()) -> None:
        """Place unplaced ``groups`` on ``device``, each whole; a group that cannot run there goes
        to its least-used allowed target, or to the fallback CPU of ``device``'s host. Then
        ``ops`` run (:meth:`run`)."""
        self._commit(list(groups), device)
        self.run(ops)

    def run(self, ops: Sequence[int]) -> None:
        """Under liveness, ``ops`` (their groups placed) run next, in order; static: nothing."""
        if self.live is not None:
            self.live.run(ops, UNPLACED)

    def _commit(self, groups: list[int], device: int) -> None:
        runnable = [g for g in groups if device in self.group_targets[g]]
        if runnable:
            self._place_groups(runnable, device)
        for g in groups:
            targets = self.group_targets[g]
            if device in targets:
                continue
            if targets:
                self._place_groups([g], self.least_used(targets))
            else:
                self._place_groups([g], self.devices.fallback_for(self.devices.host_of(device)))

    def _place_groups(self, groups: list[int], device: int) -> None:
        index = np.asarray(groups, dtype=np.int64)
        self.group_device[index] = device
        for g in groups:
            self._group_device[g] = device
        if self.live is not None:
            self.live.add_persistent(device, int(self.group_persistent[index].sum()))
        self.resident[device] += self.group_resident[index].sum()
        self.peak_temporary[device] = max(self.peak_temporary[device], self.group_temporary[index].max())

    def op_devices(self) -> np.ndarray:
        """Device of every op (after every op's group has been placed)."""
        devices = self.group_device[self.graph.group]
        if (devices == UNPLACED).any():
            missing = int(np.flatnonzero(devices == UNPLACED)[0])
            raise RuntimeError(f"op {self.graph.names[missing]!r} was never placed")
        return devices

    def overcommits(self) -> list[Overcommit]:
        """Devices holding more than their memory (after best-effort placements)."""
        names = [d.name for d in self.devices.all_devices]
        memory = [d.memory for d in self.devices.all_devices]
        return [
            Overcommit(names[d], self.used(d), memory[d])
            for d in range(self.num_targets)
            if self.used(d) > memory[d]
        ]


def check_memory_model(memory_model: str) -> None:
    """Raise ``ValueError`` naming the choices when ``memory_model`` is not one of them."""
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"unknown memory_model {memory_model!r}; choose one of: {', '.join(MEMORY_MODELS)}")
