"""What every placer returns, and the checks every placement passes before it is returned."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph
from tfplace.placer.ledger import MemoryLedger

__all__ = ["PlacerFunction", "PlacerOutput", "check_constraints"]


@dataclass
class PlacerOutput:
    """A placer's decision on an indexed graph.

    Attributes
    ----------
    op_devices : numpy.ndarray
        Device of each op, an index into ``devices.all_devices`` (targets, then fallback CPUs).
    ledger : MemoryLedger
        The memory each device holds and the groups' devices, after placing.
    estimated_makespan : float or None
        The placer's own step-time estimate (its schedule), when it builds one.
    details : dict
        Placer-specific facts for reports: cluster count, CCR after fusion, LP status, ...
    """

    op_devices: np.ndarray
    ledger: MemoryLedger
    estimated_makespan: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


class PlacerFunction(Protocol):
    """A placer: ``placer(graph, devices, **options) -> PlacerOutput``."""

    def __call__(self, graph: IndexedGraph, devices: DeviceSet, **options: Any) -> PlacerOutput: ...


def check_constraints(graph: IndexedGraph, devices: DeviceSet, op_devices: np.ndarray) -> None:
    """Raise ``AssertionError`` naming the first op placed against a hard constraint.

    Every op is on a device of ``devices.all_devices``; every co-location group is on one device;
    no op is on a device kind it has no kernel for. (Memory is soft: best effort may overcommit.)
    """
    count = len(devices.all_devices)
    if len(op_devices) != len(graph) or ((op_devices < 0) | (op_devices >= count)).any():
        raise AssertionError("placer left ops without a valid device")
    first_member = np.fromiter(
        (members[0] for members in graph.group_members), dtype=np.int64, count=len(graph.group_members)
    )
    split = np.flatnonzero(op_devices != op_devices[first_member[graph.group]])
    if len(split):
        members = graph.group_members[int(graph.group[split[0]])]
        names = ", ".join(graph.names[op] for op in members[:4])
        placed = sorted(set(op_devices[members].tolist()))
        raise AssertionError(f"co-location group of {names} split over devices {placed}")
    for op, kinds in enumerate(graph.kinds):
        if kinds is not None and devices.kind_of(int(op_devices[op])) not in kinds:
            raise AssertionError(f"op {graph.names[op]!r} placed on a device kind it cannot run on")
