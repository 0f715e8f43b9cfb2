"""Placers: Celeritas (Optimal Operation Fusion + Adjusting Placement) and the baselines it is
compared with, all on the TensorFlow-free cost graph and selected by name; ``"auto"``
(:mod:`tfplace.placer.auto`) runs several of them and more candidates through the simulator and
returns the fastest placement that fits in memory.

>>> from tfplace.placer import place_cost_graph  # doctest: +SKIP
>>> placement = place_cost_graph(graph, devices, placer="m_sct")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import inspect
import time
from typing import Any

from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph, gc_paused, index_graph
from tfplace.core.orders import kahn_order
from tfplace.core.placement import Placement
from tfplace.placer.base import PlacerFunction, PlacerOutput, check_constraints
from tfplace.placer.capacity import capacity_warnings

__all__ = [
    "DEFAULT_PLACER",
    "PLACERS",
    "PlacerOutput",
    "place_cost_graph",
    "place_whole_ops",
    "placer_function",
]

#: Placer name -> ``module:function`` implementing it (imported on first use).
PLACERS: dict[str, str] = {
    "celeritas": "tfplace.placer.celeritas:celeritas",
    "order_place": "tfplace.placer.celeritas:order_place",
    "dfs_topo": "tfplace.placer.sequential:dfs_topo",
    "m_topo": "tfplace.placer.sequential:m_topo",
    "single": "tfplace.placer.sequential:single_device",
    "m_etf": "tfplace.placer.etf:m_etf",
    "m_sct": "tfplace.placer.etf:m_sct",
    "metis": "tfplace.placer.metis:metis",
    "auto": "tfplace.placer.auto:auto",
    "data_parallel": "tfplace.placer.split_plans:data_parallel",
    "layerwise": "tfplace.placer.split_plans:layerwise",
}
"""A placer marked ``splits_ops`` (:mod:`tfplace.split`) takes the cost graph itself and returns a
:class:`Placement` whose ``pieces`` list the devices of split ops."""


#: The placer used when none is named: the fastest simulated placement that fits, among Celeritas,
#: the baselines, METIS variants and, on graphs that record what splitting needs, the split plans
#: (:mod:`tfplace.placer.auto`).
DEFAULT_PLACER = "auto"


def placer_function(name: str) -> PlacerFunction:
    """The placer registered under ``name``; the error lists the known names."""
    try:
        target = PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placer {name!r}; choose one of: {', '.join(PLACERS)}") from None
    module, function = target.split(":")
    placer: PlacerFunction = getattr(importlib.import_module(module), function)
    return placer


def place_cost_graph(
    graph: CostGraph | IndexedGraph,
    devices: DeviceSet,
    placer: str = DEFAULT_PLACER,
    *,
    simulate: bool = True,
    coplace_gradients: bool = True,
    **options: Any,
) -> Placement:
    """Place every op of ``graph`` on ``devices`` with the named placer.

    The result passes :func:`~tfplace.placer.base.check_constraints`; its ``step_time``,
    ``peak_memory`` and ``utilization`` come from the simulator when ``simulate`` is true, so that
    every placer is scored by the same model. ``placement_seconds`` covers indexing the graph and
    placing it, as Celeritas Table 4 counts it. ``warnings`` say when memory does not suffice
    (:func:`~tfplace.placer.capacity.capacity_warnings`, the static estimate; not for a placer that
    judged memory by the simulator, ``details["memory_model"] == "simulated"``) and repeat the
    placer's own warning (``details["warning"]``: m-SCT's unsolved LP, auto's simulated
    overcommit). An empty graph gives an empty placement with a step time of 0.

    With ``coplace_gradients`` (the default) every gradient op stays with the forward op it
    differentiates (the cost graph's ``gradient_of``, :mod:`tfplace.core.coplacement`); a graph without
    gradient ops places as without it. An :class:`IndexedGraph` is placed with the groups it was
    indexed with.

    Raises
    ------
    tfplace.core.costgraph.CostGraphError
        When the graph has a cycle (the message names ops on it), whichever the placer.
    """
    function = placer_function(placer)
    if getattr(function, "splits_ops", False):
        if not isinstance(graph, CostGraph):
            raise ValueError(f"placer {placer!r} splits ops and needs the cost graph, not an indexed graph")
        if "coplace_gradients" in inspect.signature(function).parameters:  # it also places whole ops
            options["coplace_gradients"] = coplace_gradients
        with gc_paused():  # a split plan's expansion allocates millions of objects, no cycles
            placement: Placement = function(graph, devices, simulate=simulate, **options)  # type: ignore[call-arg,arg-type,assignment]
        return placement
    return place_whole_ops(
        graph, devices, function, placer, simulate=simulate, coplace_gradients=coplace_gradients, **options
    )


def place_whole_ops(
    graph: CostGraph | IndexedGraph,
    devices: DeviceSet,
    function: PlacerFunction,
    name: str,
    *,
    simulate: bool = True,
    coplace_gradients: bool = True,
    **options: Any,
) -> Placement:
    """:func:`place_cost_graph` with a placer of whole ops, ``function`` (on the indexed graph), named
    ``name`` in the placement; what a splitting placer that also places whole ops calls."""
    start = time.perf_counter()
    with gc_paused():
        indexed = (
            graph
            if isinstance(graph, IndexedGraph)
            else index_graph(graph, devices.typical_link, coplace_gradients=coplace_gradients)
        )
        kahn_order(indexed)  # raises naming a cycle's ops, also for placers that never order the ops
        output = function(indexed, devices, **options)
    seconds = time.perf_counter() - start
    check_constraints(indexed, devices, output.op_devices)
    names = [d.name for d in devices.all_devices]
    ledger = output.ledger
    used = {names[d]: ledger.used(d) for d in range(len(names)) if ledger.used(d) or d < len(devices)}
    static_warnings = [] if output.details.get("memory_model") == "simulated" else capacity_warnings(ledger)
    placement = Placement(
        assignment={op: names[d] for op, d in zip(indexed.names, output.op_devices.tolist())},
        devices=devices,
        placer=name,
        memory=used,
        placement_seconds=seconds,
        warnings=static_warnings + ([output.details["warning"]] if "warning" in output.details else []),
        details=output.details,
    )
    if not simulate:
        return placement
    from tfplace.simulator import simulate as run_simulation

    return placement.with_simulation(run_simulation(indexed, output.op_devices, devices))
