"""``tfplace run``: run a placed graph for real and compare its step time with the estimate."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from tfplace.cli.common import (
    Command,
    InputError,
    checked_fetches,
    feed_fn,
    print_report,
    read_cost_graph,
    read_graph,
    read_placement,
)
from tfplace.cli.options import (
    BATCH_SIZE,
    CLUSTER,
    COST_GRAPH,
    FEED_FLAGS,
    GRAPH,
    GRAPH_FLAGS,
    INIT_OP,
    PLACEMENT,
    STEPS,
    TRACE,
    WARMUP_STEPS,
)
from tfplace.core.placement import Placement
from tfplace.core.units import format_seconds


def _run() -> int:
    """``tfplace run``: run a placed graph for real and compare its step time with the estimate."""
    from tfplace.core.tables import format_table
    from tfplace.runner import run_placement

    placement = read_placement(PLACEMENT)
    if COST_GRAPH.value:
        placement.cost_graph = read_cost_graph()
    if not CLUSTER.value:
        _check_local_devices(placement)
    graph = read_graph()
    fetches = checked_fetches(graph)
    report = run_placement(
        graph,
        placement,
        fetches,
        feed_fn(graph, fetches),
        batch_size=BATCH_SIZE.value,
        steps=STEPS.value,
        warmup_steps=WARMUP_STEPS.value,
        cluster=CLUSTER.value,
        init_op=INIT_OP.value,
        trace_path=TRACE.value,
    )
    rows: list[tuple[str, ...]] = [("steps", "count", "mean", "median", "min", "max")]
    for label, seconds in (
        ("warm-up (dropped)", report.warmup_seconds),
        ("timed", report.step_seconds),
        ("traced (FULL_TRACE)", report.traced_step_seconds),
    ):
        if seconds:
            stats = (statistics.mean(seconds), statistics.median(seconds), min(seconds), max(seconds))
            rows.append((label, str(len(seconds)), *(format_seconds(s) for s in stats)))
    placed_for = placement.cost_graph.graph.get("batch_size") if placement.cost_graph is not None else None
    estimate = (
        f"{format_seconds(placement.step_time)} at {f'batch {placed_for}' if placed_for else 'the batch size placed for'}"
        if placement.step_time is not None
        else "not estimated"
    )
    where = report.target or "in-process virtual devices"
    lines = [
        placement.summary(),
        "",
        f"real steps on {where} at batch {BATCH_SIZE.value}:",
        format_table(rows),
        f"mean step time {format_seconds(report.mean_step_time)}, estimated {estimate}; "
        f"load average {report.load_average[0]:.2f}",
    ]
    scalars = _fetched_scalars(fetches, report)
    if scalars:
        lines += ["", "fetched scalars per step:", format_table(scalars)]
    if report.mismatches:
        lines.append(f"warning: {len(report.mismatches)} ops ran elsewhere than placed, for example:")
        lines += [f"  {op}: placed on {placed}, ran on {ran}" for op, placed, ran in report.mismatches[:5]]
    else:
        lines.append("every op ran on the device the placement gave it")
    written = [f"Chrome trace of a real step: {report.trace_path}"] if report.trace_path else []
    if report.simulated_trace_path:
        written.append(f"Chrome trace of the simulated step: {report.simulated_trace_path}")
    print_report("\n".join(lines), written)
    return 0


def _fetched_scalars(fetches: list[str], report: Any) -> list[tuple[str, ...]]:
    """A table row per step of the fetches that gave a number (``--fetch train_op,loss``: the loss),
    with the step's phase; empty when no fetch is a scalar (a train op gives nothing)."""
    phases = (
        ["warm-up"] * len(report.warmup_seconds)
        + ["timed"] * len(report.step_seconds)
        + ["traced"] * len(report.traced_step_seconds)
    )
    numeric = [
        i
        for i, _ in enumerate(fetches)
        if all(
            np.ndim(values[i]) == 0 and np.issubdtype(np.asarray(values[i]).dtype, np.number)
            for values in report.values
        )
        and report.values[0][i] is not None
    ]
    if not numeric:
        return []
    rows: list[tuple[str, ...]] = [("step", "phase", *(fetches[i] for i in numeric))]
    for step, (phase, values) in enumerate(zip(phases, report.values), start=1):
        rows.append((str(step), phase, *(f"{float(values[i]):.6g}" for i in numeric)))
    return rows


def _check_local_devices(placement: Placement) -> None:
    """Fail early when a placement for this process names device kinds this machine lacks."""
    from tfplace.runner import check_local_devices, session_target_kind

    if session_target_kind(placement) != "in_process":
        return
    try:
        check_local_devices(placement)
    except ValueError as error:
        raise InputError(f"{error} (--devices /device:CPU:0-3, or give --cluster)") from None


RUN = Command(
    "run a placed graph for real (virtual CPUs or a loopback cluster) and time its steps",
    "tfplace run --graph model.meta --placement placement.json --batch_size 64 --trace step.json",
    GRAPH_FLAGS + FEED_FLAGS + (PLACEMENT, COST_GRAPH, STEPS, WARMUP_STEPS, CLUSTER, TRACE),
    (GRAPH, PLACEMENT, BATCH_SIZE),
    _run,
)
