"""Sequential placers: ops in a topological order fill one device, then the next.

* :func:`dfs_topo`: DFS-TOPO order (Celeritas section 4.2.2), each device filled to its memory;
  the memory-aware placement of Standard Evaluation step 2.
* :func:`m_topo`: Baechi's m-TOPO, the BFS-like Kahn order with the "uniform" cap
  ``graph memory / devices + largest op memory`` on each device, which spreads the model evenly.
* :func:`single_device`: every op on the first device (ops with no kernel there excepted).

Co-location groups are placed whole when their first op is reached (a gradient op co-placed with its
forward op comes after it, :func:`~tfplace.core.orders.leaders_first`). Memory is counted by
liveness along the fill order unless ``memory_model="static"`` (:mod:`tfplace.placer.ledger`);
m-TOPO's "graph memory" is then the peak of the whole step on one device in Kahn order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import dfs_topo_order, kahn_order, leaders_first
from tfplace.placer.base import PlacerOutput
from tfplace.placer.ledger import MemoryLedger

__all__ = ["dfs_topo", "fill_in_order", "m_topo", "next_fill_device", "single_device"]


def next_fill_device(
    ledger: MemoryLedger, groups: Sequence[int], current: int, ops: Sequence[int] = ()
) -> tuple[int, int, bool]:
    """Where the next unit goes when devices are filled one after another.

    Returns ``(device, new current device, best_effort)``: the first candidate at or after
    ``current`` with room for ``groups``; a unit restricted to some device kinds does not move the
    fill position; when no device has room, the least used candidate (best effort). ``ops`` are
    the ops that run next (the liveness model's check).
    """
    candidates = ledger.candidates(groups)
    for d in candidates:
        if d >= current and ledger.fits(groups, d, ops):
            unrestricted = len(candidates) == ledger.num_targets
            return d, d if unrestricted else current, False
    return ledger.least_used(candidates), current, True


def fill_in_order(ledger: MemoryLedger, units: Iterable[Sequence[int]]) -> list[int]:
    """Place each unit (a list of op positions) with :func:`next_fill_device`; returns the indices
    of the units placed by best effort."""
    current = 0
    best_effort = []
    for index, unit in enumerate(units):
        groups = ledger.new_groups(unit)
        if not groups:
            ledger.run(unit)
            continue
        device, current, forced = next_fill_device(ledger, groups, current, unit)
        ledger.commit(groups, device, unit)
        if forced:
            best_effort.append(index)
    return best_effort


def _sequential(graph: IndexedGraph, ledger: MemoryLedger, order: list[int], name: str) -> PlacerOutput:
    best_effort = fill_in_order(ledger, ([op] for op in order))
    return PlacerOutput(
        op_devices=ledger.op_devices(),
        ledger=ledger,
        details={"order": name, "best_effort_ops": [graph.names[order[i]] for i in best_effort]},
    )


def dfs_topo(
    graph: IndexedGraph, devices: DeviceSet, *, memory_model: str = "liveness", **options: Any
) -> PlacerOutput:
    """Ops in DFS-TOPO order fill each device up to its memory, then the next."""
    _no_options("dfs_topo", options)
    ledger = MemoryLedger(graph, devices, memory_model=memory_model)
    return _sequential(graph, ledger, leaders_first(graph, dfs_topo_order(graph)), "dfs_topo")


def m_topo(
    graph: IndexedGraph, devices: DeviceSet, *, memory_model: str = "liveness", **options: Any
) -> PlacerOutput:
    """Baechi's m-TOPO: Kahn order, each device capped at ``graph memory / m + largest op memory``
    (graph memory: the static sum, or under liveness the step's peak on one device)."""
    _no_options("m_topo", options)
    capacity = [d.memory for d in devices.devices]
    order = leaders_first(graph, kahn_order(graph))
    memory = graph.memory
    largest = int(memory.max()) if len(graph) else 0
    if memory_model == "static":
        total = int(memory.sum())
    else:
        whole = MemoryLedger(graph, devices, memory_model=memory_model)
        whole.commit(range(len(graph.group_members)), 0, order)
        total = whole.used(0)
    cap = total // len(capacity) + largest
    ledger = MemoryLedger(graph, devices, capacity=[min(c, cap) for c in capacity], memory_model=memory_model)
    return _sequential(graph, ledger, order, "kahn")


def single_device(
    graph: IndexedGraph, devices: DeviceSet, *, memory_model: str = "liveness", **options: Any
) -> PlacerOutput:
    """Every op on the first target device (ops with no kernel there go where they can run)."""
    _no_options("single", options)
    ledger = MemoryLedger(graph, devices, memory_model=memory_model)
    ledger.commit(range(len(graph.group_members)), 0, kahn_order(graph))
    return PlacerOutput(op_devices=ledger.op_devices(), ledger=ledger)


def _no_options(placer: str, options: dict[str, Any]) -> None:
    if options:
        raise TypeError(f"placer {placer!r} takes no options, got {sorted(options)}")
