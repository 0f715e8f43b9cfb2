"""Compare placers on one cost graph, as Celeritas Tables 3 and 4 do: step time, memory, placing time.

Every placer places the same graph on the same devices (:func:`tfplace.placer.place_cost_graph`)
and is scored by the same simulator (:func:`tfplace.simulator.simulate`; a split plan, which ``auto``
may choose, with its pieces by :func:`tfplace.split.expand.simulate_plan`). A placement *runs out of
memory* when the simulator reports an out-of-memory event, a device holding more than its capacity
at some moment: the step TensorFlow could not run (the paper's "OOM"). The placers' static estimate
of memory (every output kept) is more pessimistic than the simulated peak; where it exceeds a
device, the placer placed by best effort, which is counted separately. No TensorFlow is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfplace.core.costgraph import CostGraph, ccr, graph_memory
from tfplace.core.devices import DeviceSet
from tfplace.core.placement import Placement
from tfplace.placer import place_cost_graph
from tfplace.simulator import SimulationResult, simulate
from tfplace.split.expand import simulate_plan

__all__ = ["PLACER_VARIANTS", "FusionStats", "PlacerRun", "compare_placers", "fastest_fitting", "record_step"]

#: Placers whose details report the fusion of Table 2 (clusters, CCR after fusion).
FUSING_PLACERS = ("celeritas", "order_place")

#: Named variants compared beside the registered placers: name -> (placer, options of
#: :func:`~tfplace.placer.place_cost_graph`). ``celeritas_paper`` is Celeritas as the paper has it:
#: the static memory sum (Eq. 6, Algorithm 2), no forward/backward co-placement, and Adjusting
#: Placement's result whether or not Order-Place's schedule is shorter. ``auto_whole_ops`` is ``auto``
#: among placements of whole ops only (no split plans), what Celeritas competes with in Table 3.
PLACER_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "celeritas_paper": (
        "celeritas",
        {"memory_model": "static", "coplace_gradients": False, "order_place_guard": False},
    ),
    "auto_whole_ops": ("auto", {"splits": False}),
}


@dataclass(frozen=True)
class PlacerRun:
    """One placer's placement of one model, scored by the simulator.

    Attributes
    ----------
    model : str
    placer : str
    step_time : float
        Simulated seconds of one training step.
    placement_seconds : float
        Seconds the placer took (Table 4's metric).
    peak_memory : dict of str to int
        Simulated peak bytes of each device that held anything.
    oom_devices : tuple of str
        Devices that ran out of memory in the simulated step (their peak exceeds their memory).
    overcommitted_devices : int
        Devices the placer's static memory estimate overfills (it placed by best effort).
    bytes_moved : int
        Bytes sent between devices in the step.
    """

    model: str
    placer: str
    step_time: float
    placement_seconds: float
    peak_memory: dict[str, int] = field(default_factory=dict)
    oom_devices: tuple[str, ...] = ()
    overcommitted_devices: int = 0
    bytes_moved: int = 0

    @property
    def oom(self) -> bool:
        """The step runs out of memory on some device."""
        return bool(self.oom_devices)


@dataclass(frozen=True)
class FusionStats:
    """Table 2 for one model: its size and CCR (Eq. 1) before and after Optimal Operation Fusion.

    ``compute_seconds`` (summed op times) and ``memory_bytes`` (summed op memory, the placers'
    static estimate) tell how much work and memory the placers share out.
    """

    model: str
    ops: int
    ccr_before: float
    compute_seconds: float = math.nan
    memory_bytes: int = 0
    clusters: int | None = None
    ccr_after: float | None = None


def _run(
    model: str, name: str, placement: Placement, result: SimulationResult, devices: DeviceSet
) -> PlacerRun:
    capacity = {d.name: d.memory for d in devices}
    return PlacerRun(
        model=model,
        placer=name,
        step_time=float(result.makespan),
        placement_seconds=placement.placement_seconds,
        peak_memory=dict(placement.peak_memory),
        oom_devices=tuple(event.device for event in result.oom),
        overcommitted_devices=sum(
            used > capacity[name] for name, used in placement.memory.items() if name in capacity
        ),
        bytes_moved=int(result.bytes_moved),
    )


def compare_placers(
    graph: CostGraph, devices: DeviceSet, placers: Iterable[str], model: str
) -> tuple[list[PlacerRun], dict[str, Placement], FusionStats]:
    """Place ``graph`` on ``devices`` with each placer and simulate the step.

    Parameters
    ----------
    graph : CostGraph
        Costs on the target devices, edges priced by the link's transfer model.
    devices : DeviceSet
    placers : iterable of str
        Names of :data:`tfplace.placer.PLACERS` or :data:`PLACER_VARIANTS`.
    model : str
        The model's name, copied into the records.

    Returns
    -------
    runs : list of PlacerRun
        In the order of ``placers``.
    placements : dict of str to Placement
        By placer name.
    fusion : FusionStats
        The graph's CCR; clusters and CCR after fusion from the first fusing placer run (none
        when no placer fuses).
    """
    runs, placements = [], {}
    fusion = FusionStats(
        model=model,
        ops=len(graph),
        ccr_before=ccr(graph),
        compute_seconds=sum(t for _, t in graph.nodes(data="compute_time")),
        memory_bytes=graph_memory(graph),
    )
    for name in placers:
        placer, options = PLACER_VARIANTS.get(name, (name, {}))
        placed = place_cost_graph(graph, devices, placer, simulate=False, **options)
        result = record_step(graph, placed, devices, record=False)
        placement = placed.with_simulation(result)
        placements[name] = placement
        runs.append(_run(model, name, placement, result, devices))
        if name in FUSING_PLACERS and fusion.clusters is None:
            details = placement.details
            fusion = replace(fusion, clusters=int(details["clusters"]), ccr_after=float(details["ccr_after"]))
    return runs, placements, fusion


def fastest_fitting(runs: Sequence[PlacerRun]) -> PlacerRun | None:
    """The run with the shortest simulated step among those that fit in memory (``None`` if none)."""
    fitting = [run for run in runs if not run.oom and math.isfinite(run.step_time)]
    return min(fitting, key=lambda run: run.step_time, default=None)


def record_step(
    graph: CostGraph, placement: Placement, devices: DeviceSet, *, record: bool = True
) -> SimulationResult:
    """Simulate ``placement``, recording the schedule (for a timeline) unless ``record`` is false; a
    split plan (``placement.split_plan``, which ``auto`` may return) with its pieces."""
    if placement.split_plan is not None:
        return simulate_plan(graph, placement.split_plan, record=record)[0]
    return simulate(graph, placement.assignment, devices, record=record)
