"""Split plans against whole-op placements (issue 15, step 5): the tables ``run_experiments.py`` and
the split benchmarks write.

Every row is one placer's result on one cost graph, placed by :func:`tfplace.placer.place_cost_graph`
and scored by the one simulator: a split plan (data parallelism, the layer-wise plan, ``auto`` when
it chose one) with its pieces, joins and all-reduces (:func:`tfplace.split.expand.simulate_plan`), a
placement of whole ops as the plan that runs each op whole where it is placed. Devices of unequal
speeds (BBGraP's setting: a device of speed ``s`` runs every op in ``1/s`` of the graph's time) are
simulated alike; the placers of whole ops (and so ``auto``) do not model speeds and have no such rows.

Training (:func:`training_results`): one device, data parallelism with an all-reduce per weight
gradient and with DDP's gradient buckets, the best whole-op placement (``auto`` without split
plans), the searched plan alone (OptCNN's Algorithm 1 before any selection), the layer-wise plan
(the search selected against data parallelism and one device) and ``auto``. Inference (:func:`inference_results`): the same on forward-only graphs
(:mod:`experiments.inference`) at several batches. The "seconds" are each placer's decision time
(``placement_seconds``: for the layer-wise plan its search and selection, for ``auto`` the whole
portfolio and the split plans).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.inference import at_batch
from experiments.report import Table
from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.units import format_bytes
from tfplace.placer import place_cost_graph, placer_function
from tfplace.split.buckets import DEFAULT_BUCKET_BYTES
from tfplace.split.expand import simulate_plan
from tfplace.split.plan import OpSplit, SplitPlan

__all__ = [
    "PlanResult",
    "inference_results",
    "inference_table",
    "plans_table",
    "targets_table",
    "training_results",
]

DATA_PARALLEL = "data parallel"
ONE, DP_PER_GRADIENT, DP, WHOLE, SEARCHED, LAYERWISE, AUTO = (
    "one device",
    f"{DATA_PARALLEL}, an all-reduce per gradient",
    f"{DATA_PARALLEL}, {DEFAULT_BUCKET_BYTES // 2**20} MB buckets",
    "best whole-op placement",
    "searched plan (Algorithm 1, no selection)",
    "layer-wise",
    "auto",
)
"""Row labels: what was placed."""


@dataclass(frozen=True)
class PlanResult:
    """One placer's simulated step of one graph on one device setting."""

    model: str
    setting: str
    label: str
    chosen: str
    step_time: float
    bytes_moved: int
    peak_memory: Mapping[str, int]
    capacity: int
    seconds: float

    @property
    def oom(self) -> bool:
        return any(peak > self.capacity for peak in self.peak_memory.values())


def evaluate(
    model: str,
    setting: str,
    label: str,
    graph: CostGraph,
    devices: DeviceSet,
    placer: str,
    *,
    speeds: Sequence[float] | None = None,
    balanced: bool = True,
    placer_simulates: bool = True,
    **options: Any,
) -> PlanResult:
    """``placer``'s placement of ``graph`` on ``devices`` of ``speeds`` (equal by default), simulated
    as the module docstring says; ``balanced``: the placer is told the speeds, if it takes them;
    ``placer_simulates=False``: the placer is asked not to simulate (the layer-wise placer then
    returns its search alone), the result is simulated here."""
    told = bool(speeds) and balanced and "speeds" in inspect.signature(placer_function(placer)).parameters
    if told:
        options["speeds"] = speeds
    simulate = placer_simulates and (not speeds or told)
    placement = place_cost_graph(graph, devices, placer, simulate=simulate, **options)
    plan = placement.split_plan
    if plan is None:  # whole ops: simulated as the plan that runs them so
        plan = SplitPlan({op: OpSplit.whole(placement.assignment[op]) for op in graph}, devices)
    if plan.step_time is None or (speeds and not told):
        simulate_plan(graph, plan, speeds=dict(zip(devices.names, speeds)) if speeds else None)
    assert plan.step_time is not None
    return PlanResult(
        model,
        setting,
        label,
        placement.placer,
        plan.step_time,
        plan.bytes_moved,
        {d: plan.peak_memory.get(d, 0) for d in devices.names},
        min(d.memory for d in devices.devices),
        placement.placement_seconds,
    )


def training_results(
    model: str, graph: CostGraph, devices: DeviceSet, unequal: DeviceSet | None, speeds: Sequence[float]
) -> list[PlanResult]:
    """One device, data parallelism with an all-reduce per gradient and in buckets, the best whole-op
    placement, the searched plan alone, the layer-wise plan and ``auto`` on ``devices``; with
    ``unequal`` (devices of ``speeds``), data parallelism with equal and with proportional pieces and
    the layer-wise plan there."""
    setting = f"{len(devices)} GPUs"
    rows: Sequence[tuple[str, str, dict[str, Any]]] = (
        (ONE, "single", {}),
        (DP_PER_GRADIENT, "data_parallel", {"bucket_bytes": None}),
        (DP, "data_parallel", {}),
        (WHOLE, "auto", {"splits": False}),
        (SEARCHED, "layerwise", {"placer_simulates": False}),
        (LAYERWISE, "layerwise", {}),
        (AUTO, "auto", {}),
    )
    results = [
        evaluate(model, setting, label, graph, devices, placer, **options) for label, placer, options in rows
    ]
    if unequal is not None:
        results += _unequal(model, graph, unequal, speeds)
    return results


def _unequal(model: str, graph: CostGraph, devices: DeviceSet, speeds: Sequence[float]) -> list[PlanResult]:
    """On devices of ``speeds``: one device (the first), data parallelism with equal and with
    proportional pieces, and the layer-wise plan (its pieces proportional)."""
    setting = f"speeds {'/'.join(f'{s:g}' for s in speeds)}"
    return [
        evaluate(model, setting, ONE, graph, devices, "single", speeds=speeds),
        evaluate(
            model,
            setting,
            f"{DATA_PARALLEL}, equal pieces",
            graph,
            devices,
            "data_parallel",
            speeds=speeds,
            balanced=False,
        ),
        evaluate(
            model,
            setting,
            f"{DATA_PARALLEL}, proportional pieces",
            graph,
            devices,
            "data_parallel",
            speeds=speeds,
        ),
        evaluate(model, setting, LAYERWISE, graph, devices, "layerwise", speeds=speeds),
    ]


def inference_results(
    model: str,
    graph: CostGraph,
    batches: Sequence[int],
    settings: Sequence[tuple[DeviceSet, Sequence[float] | None]],
) -> list[PlanResult]:
    """For each batch of ``batches`` (:func:`experiments.inference.at_batch` of the forward graph)
    and each device setting (devices, their speeds or ``None``): :func:`training_results`' rows on
    equal devices, those of :func:`_unequal` on devices of different speeds."""
    results = []
    for batch in batches:
        scaled = at_batch(graph, batch)
        label = f"{model}, batch {batch}"
        for devices, speeds in settings:
            if speeds is None:
                results += training_results(label, scaled, devices, None, ())
            else:
                results += _unequal(label, scaled, devices, speeds)
    return results


def _peaks(result: PlanResult) -> str:
    """Each device's simulated peak, ``OOM`` when one exceeds its memory."""
    peaks = " / ".join(format_bytes(peak) for peak in result.peak_memory.values())
    return peaks + (" OOM" if result.oom else "")


def plans_table(results: Sequence[PlanResult], name: str, title: str, notes: str = "") -> Table:
    """A row per result: step, against one device, bytes moved, peak per device, decision seconds."""
    one = {(r.model, r.setting): r.step_time for r in results if r.label == ONE}
    rows = tuple(
        (
            r.model,
            r.setting,
            r.label,
            r.chosen,
            f"{r.step_time * 1e3:.2f}",
            f"{one[r.model, r.setting] / r.step_time:.2f}x" if (r.model, r.setting) in one else "",
            format_bytes(r.bytes_moved),
            _peaks(r),
            f"{r.seconds:.2f}",
        )
        for r in results
    )
    columns = ("model", "devices", "plan", "placer's result", "step (ms)", "vs one device", "bytes moved")
    return Table(name, title, (*columns, "peak per device", "decision (s)"), rows, notes)


def targets_table(results: Sequence[PlanResult], name: str) -> Table:
    """Issue 15's targets per model and equal-device setting: the layer-wise plan and ``auto`` never
    slower than data parallelism (in buckets), one device or the best whole-op placement; Inception
    V3's training at least 3.5x one device; the Transformer and the NMT faster than data parallelism;
    ``auto``'s step before (whole ops) and after (split plans); the searched plan alone against data
    parallelism; and the decision seconds of the layer-wise placer and of ``auto``."""
    rows = []
    settings = dict.fromkeys((r.model, r.setting) for r in results if r.label == AUTO)
    for model, setting in settings:
        found = {r.label: r for r in results if (r.model, r.setting) == (model, setting)}
        one, dp, whole = found[ONE].step_time, found[DP].step_time, found[WHOLE].step_time
        layerwise, auto = found[LAYERWISE].step_time, found[AUTO].step_time
        misses = [
            what
            for what, held in (
                (
                    "layer-wise slower than DP, one device or whole ops",
                    layerwise <= min(dp, one, whole) * (1 + 1e-9),
                ),
                ("auto slower than DP, one device or whole ops", auto <= min(dp, one, whole) * (1 + 1e-9)),
                ("< 3.5x one device", model != "inception_v3" or one / min(layerwise, auto) >= 3.5),
                ("not faster than DP", model not in ("nmt", "transformer") or min(layerwise, auto) < dp),
            )
            if not held
        ]
        rows.append(
            (
                model,
                setting,
                f"{whole:.3f} -> {auto:.3f}",
                found[AUTO].chosen,
                f"{dp / auto:.2f}x",
                f"{one / auto:.2f}x",
                f"{dp / layerwise:.2f}x",
                f"{dp / found[SEARCHED].step_time:.2f}x",
                f"{found[LAYERWISE].seconds:.1f}",
                f"{found[AUTO].seconds:.1f}",
                "met" if not misses else "missed: " + ", ".join(misses),
            )
        )
    columns = ("model", "devices", "auto step (s): whole ops -> with splits", "auto chose", "auto vs DP")
    return Table(
        name,
        "Targets of issue 15 and auto's step before and after it admits split plans",
        (
            *columns,
            "auto vs one device",
            "layer-wise vs DP",
            "search alone vs DP",
            "layer-wise placer (s)",
            "auto decision (s)",
            "targets",
        ),
        tuple(rows),
    )


def inference_table(results: Sequence[PlanResult], name: str, title: str, notes: str = "") -> Table:
    """Latency (ms) per model, batch and devices: one column per plan, and ``auto``'s choice."""
    keys = dict.fromkeys((r.model, r.setting) for r in results)
    labels = list(dict.fromkeys(r.label for r in results))
    rows = []
    for model, setting in keys:
        found = {r.label: r for r in results if (r.model, r.setting) == (model, setting)}
        cells = [
            f"{found[label].step_time * 1e3:.2f}{' OOM' if found[label].oom else ''}"
            if label in found
            else "-"
            for label in labels
        ]
        auto = found.get(AUTO)
        rows.append(
            (model, setting, *cells, auto.chosen if auto else "-", f"{auto.seconds:.2f}" if auto else "-")
        )
    columns = (*(f"{label} (ms)" for label in labels), "auto chose", "auto decision (s)")
    return Table(name, title, ("model, batch", "devices", *columns), tuple(rows), notes)
