"""The result of placing a graph: which device runs each op, and what that is expected to cost."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tfplace.core.costgraph import CostGraph, atomic_write_text
from tfplace.core.devices import Device, DeviceSet
from tfplace.core.tables import format_table
from tfplace.core.transfer import TransferModel
from tfplace.core.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from tfplace.core.simulated_step import SimulationResult

__all__ = [
    "SIMULATED_OUT_OF_MEMORY",
    "GraphWriter",
    "Placement",
    "PlacementError",
    "graph_writer",
    "register_graph_writer",
    "simulated_memory_warnings",
]

GraphWriter = Callable[[Any, Any], Any]
"""``writer(placement, graph) -> placed graph``: writes a placement (or a split plan) into a
framework's graph."""

_graph_writer: list[GraphWriter] = []


def register_graph_writer(writer: GraphWriter) -> None:
    """Make :meth:`Placement.apply` write with ``writer``. Importing :mod:`tfplace` registers
    :func:`tfplace.tf_graph.apply.apply_placement`, so that the core never imports TensorFlow's side."""
    _graph_writer[:] = [writer]


def graph_writer() -> GraphWriter:
    """The registered writer; :meth:`Placement.apply` and a split plan's ``apply`` write with it."""
    if not _graph_writer:
        raise PlacementError("no graph writer is registered: import tfplace to write placements into graphs")
    return _graph_writer[0]


SIMULATED_OUT_OF_MEMORY = "runs out of memory in the simulated step"
"""The words of every warning :func:`simulated_memory_warnings` gives (to find and replace them)."""


class PlacementError(ValueError):
    """A placement does not fit the graph it is applied to: the message names the ops."""


@dataclass
class Placement:
    """Op -> device, with the estimates that justify it.

    Attributes
    ----------
    assignment : dict
        Device name of every op, by op name.
    devices : DeviceSet
        The devices placed on. Iterating it gives the placement targets; ops that no target can
        run (a ``tf.data`` iterator, summaries on a GPU-only set) go to a fallback CPU, which is in
        ``devices.all_devices`` (and ``devices.fallback_cpus``); :attr:`device_names` lists the
        targets and the fallback CPUs that hold ops, as the summary does.
    placer : str
        Which placer produced it (``"celeritas"``, ``"m_etf"``, ...).
    memory : dict
        Static memory estimate of each device in bytes (persistent state, all outputs and the
        largest temporary memory of its ops).
    step_time : float or None
        Estimated seconds of one training step (simulated), when it was estimated.
    peak_memory : dict
        Simulated peak memory of each device, when simulated.
    utilization : dict
        Simulated busy fraction of each device during a step, when simulated.
    placement_seconds : float
        Seconds the placer took (profiling excluded), Celeritas Table 4's metric.
    warnings : list of str
        Best-effort decisions the user should know about (overcommitted devices, ...).
    cost_graph : CostGraph or None
        The costs the placement was made with (not saved by :meth:`save`; save it with
        :func:`tfplace.core.costgraph.save_json`).
    pieces : dict
        Devices of the pieces of each op a split plan runs in pieces (:class:`tfplace.split.plan.SplitPlan`),
        by op name; ``assignment`` holds the first piece's device. Empty for a placement of whole ops.
    split_plan : object or None
        The split plan (:class:`tfplace.split.plan.SplitPlan`) this placement summarizes, when it
        came from one: :meth:`apply` then rewrites the graph into the plan's pieces. Not saved by
        :meth:`save` (save the plan itself).
    details : dict
        Placer-specific facts (:attr:`tfplace.placer.PlacerOutput.details`: Celeritas' cluster
        count and CCR after fusion, ...); not saved by :meth:`save`.
    """

    assignment: dict[str, str]
    devices: DeviceSet
    placer: str = ""
    memory: dict[str, int] = field(default_factory=dict)
    step_time: float | None = None
    peak_memory: dict[str, int] = field(default_factory=dict)
    utilization: dict[str, float] = field(default_factory=dict)
    placement_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    cost_graph: CostGraph | None = field(default=None, repr=False, compare=False)
    pieces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    split_plan: Any = field(default=None, repr=False, compare=False)
    details: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def device_fn(self, default: str = "") -> Callable[[Any], str]:
        """A device function for ``with tf.device(placement.device_fn()):`` while rebuilding a graph.

        Ops are matched by name; an op the placement does not know gets ``default`` (``""`` leaves
        the choice to TensorFlow).
        """
        assignment = self.assignment

        def device_for(op: Any) -> str:
            return assignment.get(op.name, default)

        return device_for

    def apply(self, graph: Any) -> Any:
        """Write the devices into a ``tf.Graph`` (in place) or a ``GraphDef`` / ``MetaGraphDef``
        (returns a placed copy); with a :attr:`split_plan`, return the graph rewritten into its
        pieces. See :func:`tfplace.tf_graph.apply.apply_placement`, the writer
        :func:`register_graph_writer` was given."""
        return graph_writer()(self, graph)

    @property
    def device_names(self) -> list[str]:
        """Every target device, then each fallback CPU that holds ops or pieces: the summary's rows."""
        used = set(self.assignment.values()).union(*self.pieces.values())
        return [d.name for d in self.devices.all_devices if d.name in used or d in self.devices.devices]

    def ops_on(self, device: str) -> list[str]:
        """Names of the ops placed on ``device``."""
        return [op for op, d in self.assignment.items() if d == device]

    def with_simulation(self, result: SimulationResult) -> Placement:
        """A copy whose ``step_time``, ``peak_memory`` and ``utilization`` come from ``result``, a
        simulated step of this placement on :attr:`devices`."""
        names = [d.name for d in self.devices.all_devices]
        makespan = float(result.makespan)
        peak_memory = {names[d]: int(p) for d, p in enumerate(result.peak_memory) if p}
        kept = [warning for warning in self.warnings if SIMULATED_OUT_OF_MEMORY not in warning]
        return replace(
            self,
            step_time=makespan,
            peak_memory=peak_memory,
            utilization={
                names[d]: float(b) / makespan if makespan > 0 else 0.0
                for d, b in enumerate(result.busy_time)
                if b
            },
            warnings=kept + simulated_memory_warnings(peak_memory, self.devices),
        )

    def summary(self) -> str:
        """A table: per device its ops, capacity, estimated and simulated peak memory and busy
        share of the step; then the estimated step time and the warnings.

        ``estimate`` is the placer's static memory estimate (persistent state, all outputs and the
        largest temporary memory of the device's ops); ``sim. peak`` the most memory the device
        holds at once in the simulated step; percentages are of the device's capacity, never rounded
        down to 100% above it (``100.1%``), and a simulated peak above it is marked ``OVER``
        (``100.1% OVER``) with a warning. The static estimate above capacity is not marked: the
        capacity warnings, or the note below, say what it means. A note says when an estimate
        exceeds its capacity and the placer judged memory by simulating instead.
        """
        counts = Counter(self.assignment.values())
        piece_counts = Counter(device for devices in self.pieces.values() for device in devices)
        counts.update(piece_counts)
        counts.subtract(self.assignment[op] for op in self.pieces)
        names = self.device_names
        capacity = {d.name: d.memory for d in self.devices.devices}
        rows: list[tuple[str, ...]] = [("device", "ops", "capacity", "estimate", "sim. peak", "busy")]
        if self.pieces:
            rows[0] = ("device", "ops", "of which pieces", *rows[0][2:])
        for name in names:
            cap = capacity.get(name)
            pieces = (f"{piece_counts.get(name, 0):,}",) if self.pieces else ()
            rows.append(
                (
                    name,
                    f"{counts.get(name, 0):,}",
                    *pieces,
                    format_bytes(cap) if cap else "-",
                    _share(self.memory.get(name, 0), cap, mark=False),
                    _share(self.peak_memory[name], cap) if name in self.peak_memory else "-",
                    f"{self.utilization[name]:.0%}" if name in self.utilization else "-",
                )
            )
        lines = [format_table(rows)]
        step = (
            f"{format_seconds(self.step_time)} (simulated)" if self.step_time is not None else "not estimated"
        )
        split = f", {len(self.pieces):,} of them split into pieces" if self.pieces else ""
        lines.append(
            f"estimated step time: {step}; placer {self.placer or '?'} placed "
            f"{self._op_count()}{split} in {format_seconds(self.placement_seconds)}"
        )
        memory_warnings = simulated_memory_warnings(self.peak_memory, self.devices)
        lines.extend(f"warning: {w}" for w in dict.fromkeys([*self.warnings, *memory_warnings]))
        over_estimate = any(self.memory.get(d.name, 0) > d.memory for d in self.devices.devices)
        if over_estimate and self.details.get("memory_model") == "simulated":
            lines.append(
                f"note: placer {self.placer} judged memory by the simulated peak; an estimate above "
                "capacity is the static model's bound, which keeps every output for the whole step"
            )
        return "\n".join(lines)

    def _op_count(self) -> str:
        """``"6,361 ops of the graph (3,079 in the step)"``, ``"3,079 ops of the step"``, or
        ``"N ops"`` without the cost graph that tells them apart."""
        total = len(self.assignment)
        if self.cost_graph is None:
            return f"{total:,} ops"
        in_step = sum(1 for op in self.assignment if op in self.cost_graph)
        if in_step == total:
            return f"{total:,} ops of the step"
        return f"{total:,} ops of the graph ({in_step:,} in the step)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "tfplace.placement",
            "version": 1,
            "placer": self.placer,
            "devices": [{"name": d.name, "memory": d.memory} for d in self.devices.devices],
            "links": {
                "intra_host": self.devices.intra_host.to_dict(),
                "inter_host": self.devices.inter_host.to_dict(),
                "shared_bus": self.devices.shared_bus,
                "step_overhead": self.devices.step_overhead,
                "cores": self.devices.cores,
            },
            "assignment": self.assignment,
            "memory": self.memory,
            "step_time": self.step_time,
            "peak_memory": self.peak_memory,
            "utilization": self.utilization,
            "placement_seconds": self.placement_seconds,
            "warnings": self.warnings,
            **({"pieces": {op: list(devices) for op, devices in self.pieces.items()}} if self.pieces else {}),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the placement as JSON (atomically)."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Placement:
        if document.get("format") != "tfplace.placement":
            raise PlacementError("not a tfplace placement (expected format 'tfplace.placement')")
        links = document["links"]
        devices = DeviceSet(
            tuple(Device(d["name"], int(d["memory"])) for d in document["devices"]),
            intra_host=TransferModel.from_dict(links["intra_host"]),
            inter_host=TransferModel.from_dict(links["inter_host"]),
            shared_bus=bool(links["shared_bus"]),
            step_overhead=float(links.get("step_overhead", 0.0)),
            cores=int(links.get("cores", 0)),
        )
        return cls(
            assignment=dict(document["assignment"]),
            devices=devices,
            placer=document.get("placer", ""),
            memory=dict(document.get("memory", {})),
            step_time=document.get("step_time"),
            peak_memory=dict(document.get("peak_memory", {})),
            utilization=dict(document.get("utilization", {})),
            placement_seconds=float(document.get("placement_seconds", 0.0)),
            warnings=list(document.get("warnings", [])),
            pieces={op: tuple(devices) for op, devices in document.get("pieces", {}).items()},
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Placement:
        try:
            with open(path, encoding="utf-8") as handle:
                return cls.from_dict(json.load(handle))
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise PlacementError(f"{path}: not a readable placement ({error})") from None


def simulated_memory_warnings(peak_memory: Mapping[str, int], devices: DeviceSet) -> list[str]:
    """A warning for each device of ``devices`` whose simulated peak exceeds its memory, whichever
    placer made the placement (fallback CPUs have no limit)."""
    return [
        f"{device.name} {SIMULATED_OUT_OF_MEMORY}: peak {peak_memory[device.name]:,} bytes of its "
        f"{device.memory:,} ({_percent(peak_memory[device.name], device.memory)})"
        for device in devices.devices
        if peak_memory.get(device.name, 0) > device.memory
    ]


def _share(nbytes: int, capacity: int | None, *, mark: bool = True) -> str:
    """``"6.96 MB (87%)"``: bytes and their share of the capacity (bytes alone without one);
    ``"354 MB (122.5% OVER)"`` above it (without ``OVER`` unless ``mark``)."""
    if not capacity:
        return format_bytes(nbytes)
    over = " OVER" if mark and nbytes > capacity else ""
    return f"{format_bytes(nbytes)} ({_percent(nbytes, capacity)}{over})"


def _percent(nbytes: int, capacity: int) -> str:
    """``"87%"``; above the capacity ``"122.5%"``, never rounded down to 100% (``">100%"``)."""
    if nbytes <= capacity:
        return f"{nbytes / capacity:.0%}"
    shown = f"{nbytes / capacity:.1%}"
    return ">100%" if shown == "100.0%" else shown
