"""Why a best-effort placement overcommits: what no placement could fit, said in the user's terms.

Memory is a soft constraint for every placer (:mod:`tfplace.placer.ledger`): when nothing fits,
ops go to the least used device and the ledger reports each overcommitted device. That report does
not say whether a better placement existed. The checks here do, from the graph and the devices
alone, in the static memory model (resident bytes plus the largest temporary bytes per device):

* :func:`oversized_groups`: a co-location group (or an op outside any group) whose resident plus
  temporary bytes exceed the memory of every target device that can run it fits nowhere;
* :func:`memory_shortfall`: when the resident bytes of every op a target can run, plus the largest
  temporary bytes, exceed the targets' total memory, no placement fits.

:func:`capacity_warnings` gives these first, then the ledger's overcommits, as
:attr:`tfplace.core.placement.Placement.warnings`. Ops that no target can run go to a fallback CPU
without a memory limit and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfplace.placer.ledger import MemoryLedger

__all__ = ["MemoryShortfall", "OversizedGroup", "capacity_warnings", "memory_shortfall", "oversized_groups"]

_SHOWN = 4


@dataclass(frozen=True)
class OversizedGroup:
    """A co-location group, or an op outside any group, larger than every target that can run it.

    Attributes
    ----------
    ops : tuple of str
        The group's ops, sorted (TensorFlow names a group after its first member); one op for an
        op outside any group.
    nbytes : int
        The group's resident bytes plus its largest temporary bytes.
    largest_device : str
        The target with the most memory among those that can run the group.
    largest_memory : int
        That device's memory in bytes.
    """

    ops: tuple[str, ...]
    nbytes: int
    largest_device: str
    largest_memory: int

    def __str__(self) -> str:
        if len(self.ops) == 1:
            what = f"op {self.ops[0]!r}"
        else:
            more = f" and {len(self.ops) - _SHOWN} more" if len(self.ops) > _SHOWN else ""
            what = f"co-location group {self.ops[0]!r} ({len(self.ops)} ops: {', '.join(self.ops[:_SHOWN])}{more})"
        return (
            f"{what} needs {self.nbytes:,} bytes, more than the largest device that can run it "
            f"({self.largest_device}, {self.largest_memory:,} bytes): placed by best effort"
        )


@dataclass(frozen=True)
class MemoryShortfall:
    """The target devices together hold less than the graph needs: no placement fits."""

    needed: int
    available: int
    devices: int

    def __str__(self) -> str:
        return (
            f"the graph needs at least {self.needed:,} bytes on the target devices (every op's resident "
            f"bytes plus the largest temporary bytes), the {self.devices} devices hold {self.available:,}: "
            "no placement fits, ops were placed by best effort"
        )


def _group_need(ledger: MemoryLedger) -> np.ndarray:
    """Resident plus largest temporary bytes of each group."""
    return ledger.group_resident + ledger.group_temporary


def oversized_groups(ledger: MemoryLedger) -> list[OversizedGroup]:
    """Co-location groups, and ops outside any group, whose bytes exceed every target that can run them."""
    graph = ledger.graph
    devices = ledger.devices.all_devices
    memory = [device.memory for device in devices]
    need = _group_need(ledger).tolist()
    largest_of: dict[tuple[int, ...], int] = {}
    found = []
    for group, targets in enumerate(ledger.group_targets):
        if not targets:
            continue
        if targets not in largest_of:
            largest_of[targets] = max(targets, key=lambda d: (memory[d], -d))
        largest = largest_of[targets]
        if need[group] > memory[largest]:
            found.append(
                OversizedGroup(
                    ops=tuple(sorted(graph.names[op] for op in graph.group_members[group])),
                    nbytes=int(need[group]),
                    largest_device=devices[largest].name,
                    largest_memory=memory[largest],
                )
            )
    return found


def memory_shortfall(ledger: MemoryLedger) -> MemoryShortfall | None:
    """The shortfall when the targets' total memory is below what any placement needs, else ``None``.

    Any placement holds, summed over the targets, the resident bytes of every group a target can
    run plus at least the largest temporary bytes of one of them: a lower bound of what it needs.
    """
    runnable = np.array([bool(targets) for targets in ledger.group_targets], dtype=bool)
    if not runnable.any():
        return None
    needed = int(ledger.group_resident[runnable].sum() + ledger.group_temporary[runnable].max())
    available = sum(device.memory for device in ledger.devices.devices)
    if needed <= available:
        return None
    return MemoryShortfall(needed=needed, available=available, devices=len(ledger.devices))


def capacity_warnings(ledger: MemoryLedger) -> list[str]:
    """What a placement's user should know about memory: a shortfall of the whole set, groups too
    large for any device, then each overcommitted device (bytes placed and its memory)."""
    shortfall = memory_shortfall(ledger)
    return [
        *([str(shortfall)] if shortfall is not None else []),
        *(str(group) for group in oversized_groups(ledger)),
        *(str(overcommit) for overcommit in ledger.overcommits()),
    ]
