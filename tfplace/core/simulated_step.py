"""What one simulated training step reports: totals per device and link, and the recorded schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["MemoryTrace", "OomEvent", "OpTask", "Schedule", "SimulationResult", "TransferTask"]


class OpTask(NamedTuple):
    """One op's run: its name, the device index (into ``devices.all_devices``), start and end [s]."""

    op: str
    device: int
    start: float
    end: float


class TransferTask(NamedTuple):
    """One tensor sent from device ``src`` to ``dst`` (indices into ``devices.all_devices``).

    ``slot`` is the producer's output slot, ``None`` for an edge that carries bytes without naming
    a slot (such an edge is a tensor of its own).
    """

    producer: str
    slot: int | None
    src: int
    dst: int
    bytes: int
    start: float
    end: float


class MemoryTrace(NamedTuple):
    """Bytes in use on one device after each change: ``bytes[i]`` from ``times[i]`` on."""

    times: np.ndarray
    bytes: np.ndarray


@dataclass(frozen=True)
class OomEvent:
    """The first moment a device holds more than its memory.

    ``cause`` says what allocated the bytes that crossed the limit: ``"persistent"`` (the op's
    persistent state, held from time 0), ``"start"`` (the op's outputs and temporary memory) or
    ``"receive"`` (a tensor of ``op`` arriving on the device).
    """

    device: str
    op: str
    time: float
    bytes_in_use: int
    capacity: int
    cause: str

    def __str__(self) -> str:
        return (
            f"{self.device} out of memory at {self.time:.6f} s ({self.cause} of {self.op!r}): "
            f"{self.bytes_in_use:,} bytes in use, capacity {self.capacity:,}"
        )


@dataclass(frozen=True)
class Schedule:
    """Everything that ran, in start order, and each device's memory over time.

    ``memory[d]`` belongs to ``devices.all_devices[d]``.
    """

    ops: list[OpTask]
    transfers: list[TransferTask]
    memory: list[MemoryTrace]


@dataclass(frozen=True)
class SimulationResult:
    """The simulated step of one placement.

    Attributes
    ----------
    makespan : float
        Seconds from the start of the step until its last op ends, plus ``step_overhead``.
    busy_time : numpy.ndarray
        Seconds each device of ``devices.all_devices`` spends running ops.
    peak_memory : numpy.ndarray
        Largest number of bytes each device holds at any moment (int64); on devices sharing
        cores, in either order a receive's race can take (the simulator's rule 4).
    bytes_moved : int
        Bytes of every simulated transfer.
    link_bytes : numpy.ndarray
        ``link_bytes[src, dst]``: bytes sent from device ``src`` to device ``dst`` (int64).
    transfers : int
        Number of transfers (tensors sent to a device).
    transfer_seconds : float
        Summed duration of the transfers.
    ccr : float
        Eq. 1 on the graph: summed edge transfer times over summed compute time.
    placed_ccr : float
        ``transfer_seconds`` over summed compute time: the communication this placement causes.
    oom : list of OomEvent
        The first out-of-memory moment of each device that overflowed (in either order, as
        ``peak_memory``), in time order.
    schedule : Schedule or None
        What ran when, with ``record=True``.
    step_overhead : float
        Seconds of the makespan that are the framework's per-step work: ``devices.step_overhead``
        per host that runs ops (the schedule's times do not include it).
    """

    makespan: float
    busy_time: np.ndarray
    peak_memory: np.ndarray
    bytes_moved: int
    link_bytes: np.ndarray
    transfers: int
    transfer_seconds: float
    ccr: float
    placed_ccr: float
    oom: list[OomEvent]
    schedule: Schedule | None = None
    step_overhead: float = 0.0
