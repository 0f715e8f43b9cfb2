"""``tfplace simulate``: score a placement or a split plan on a cost graph."""

from __future__ import annotations

from tfplace.cli.common import (
    Command,
    print_report,
    read_cost_graph,
    read_placement,
    simulated,
    write_pictures,
)
from tfplace.cli.options import COST_GRAPH, PLACEMENT, PRIORITY, TIMELINE_PNG, TRACE
from tfplace.core.units import format_bytes, format_seconds


def _simulate() -> int:
    """``tfplace simulate``: score a placement or a split plan (with its pieces) on a cost graph."""
    from dataclasses import replace

    cost_graph = read_cost_graph()
    placement = read_placement(PLACEMENT)
    result, simulated_graph = simulated(cost_graph, placement, record=bool(TRACE.value or TIMELINE_PNG.value))
    step = {op: placement.assignment[op] for op in cost_graph}
    pieces = {op: devices for op, devices in placement.pieces.items() if op in cost_graph}
    scored = replace(placement.with_simulation(result), assignment=step, pieces=pieces, cost_graph=cost_graph)
    lines = [
        scored.summary(),
        f"transfers: {result.transfers:,} tensors, {format_bytes(result.bytes_moved)}, "
        f"{format_seconds(result.transfer_seconds)} on the links (priority {PRIORITY.value})",
    ]
    lines += [f"out of memory: {event}" for event in result.oom] or ["out of memory: no device"]
    print_report("\n".join(lines), write_pictures(result, placement, simulated_graph))
    return 0


SIMULATE = Command(
    "score a placement or a split plan on a cost graph: step time, peak memory, out-of-memory; draw the step",
    "tfplace simulate --cost_graph graph.json.gz --placement placement.json --timeline_png step.png",
    (COST_GRAPH, PLACEMENT, PRIORITY, TRACE, TIMELINE_PNG),
    (COST_GRAPH, PLACEMENT),
    _simulate,
)
